// net::Listener over real TCP: a burst of connections is accepted a few at a
// time, with the loop's other ready events served between the batches, and
// none is lost.
#include "lockd/net/listener.h"

#include <arpa/inet.h>
#include <event2/event.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace lockd::net {
namespace {

class ListenerTest : public ::testing::Test {
 protected:
  void SetUp() override { base_ = event_base_new(); }
  void TearDown() override {
    listener_.reset();
    for (int fd : accepted_) ::close(fd);
    for (int fd : clients_) ::close(fd);
    event_base_free(base_);
  }

  void listen() {
    listener_ = std::make_unique<Listener>(base_, [this](int fd, const sockaddr* peer, int len) {
      accepted_.push_back(fd);
      if (peer != nullptr && peer->sa_family == AF_INET && len >= static_cast<int>(sizeof(sockaddr_in))) {
        char text[INET_ADDRSTRLEN] = {};
        inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(peer)->sin_addr, text, sizeof text);
        peers_.emplace_back(text);
      }
    });
    std::string error;
    ASSERT_TRUE(listener_->listen(Endpoint{"127.0.0.1", 0}, error)) << error;
  }

  // `n` connections that the kernel completes against the backlog at once.
  void connect_many(int n) {
    const Endpoint at = listener_->bound();
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_port = htons(at.port);
    inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
    for (int i = 0; i < n; ++i) {
      const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
      ASSERT_GE(fd, 0);
      ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
      clients_.push_back(fd);
    }
  }

  // Runs loop turns (EVLOOP_ONCE, as the daemon) until `done` or `max_turns` ran.
  template <typename Done>
  int run_until(Done done, int max_turns) {
    int turns = 0;
    while (!done() && turns < max_turns) {
      event_base_loop(base_, EVLOOP_ONCE);
      ++turns;
    }
    return turns;
  }

  event_base* base_ = nullptr;
  std::unique_ptr<Listener> listener_;
  std::vector<int> accepted_;
  std::vector<std::string> peers_;
  std::vector<int> clients_;
};

TEST_F(ListenerTest, ABurstIsAcceptedAFewAtATimeAndNoneIsLost) {
  listen();
  constexpr int kBurst = 50;
  connect_many(kBurst);
  event_base_loop(base_, EVLOOP_ONCE);
  // One turn accepts one batch, not the whole backlog.
  EXPECT_EQ(accepted_.size(), static_cast<std::size_t>(Listener::kAcceptsPerTurn));
  run_until([&] { return accepted_.size() == kBurst; }, 10 * kBurst);
  EXPECT_EQ(accepted_.size(), static_cast<std::size_t>(kBurst));
  // The peer's address comes with each socket (no getpeername).
  ASSERT_EQ(peers_.size(), static_cast<std::size_t>(kBurst));
  for (const std::string& p : peers_) EXPECT_EQ(p, "127.0.0.1");
}

TEST_F(ListenerTest, AReadyClientIsServedBetweenTwoBatchesOfABurst) {
  listen();
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, pair), 0);
  std::size_t accepted_when_read = 0;
  bool read = false;
  struct Ctx {
    std::size_t* at;
    bool* read;
    const std::vector<int>* accepted;
  } ctx{&accepted_when_read, &read, &accepted_};
  event* ev = event_new(
      base_, pair[0], EV_READ,
      [](evutil_socket_t, short, void* arg) {
        auto* c = static_cast<Ctx*>(arg);
        *c->at = c->accepted->size();
        *c->read = true;
      },
      &ctx);
  event_add(ev, nullptr);
  // The burst is ready first, the client's request after it.
  connect_many(40);
  ASSERT_EQ(::write(pair[1], "A o k 1000\n", 11), 11);
  run_until([&] { return read && accepted_.size() == 40; }, 1000);
  EXPECT_TRUE(read);
  // libevent's listener alone would have accepted all 40 first.
  EXPECT_LE(accepted_when_read, static_cast<std::size_t>(Listener::kAcceptsPerTurn));
  EXPECT_EQ(accepted_.size(), 40u);
  event_free(ev);
  ::close(pair[0]);
  ::close(pair[1]);
}

}  // namespace
}  // namespace lockd::net
