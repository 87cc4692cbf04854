// A scripted stand-in for a lockd node, for what a single real lockd
// cannot show: `M` redirects, `E no_leader`, `E indeterminate`, replies in
// an order of the test's choosing. Listens on 127.0.0.1 (port 0), serves
// every connection on one thread, and answers each request line with
// whatever the test's handler returns (nothing, one line, or several).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lockd::testing {

class FakeServer {
 public:
  // Gets a request line (without `\n`); returns reply lines (without `\n`).
  using Handler = std::function<std::vector<std::string>(const std::string& line)>;

  explicit FakeServer(Handler handler);
  ~FakeServer();  // stops the thread, closes every socket
  FakeServer(const FakeServer&) = delete;
  FakeServer& operator=(const FakeServer&) = delete;

  std::uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  // Every request line received so far, in arrival order.
  std::vector<std::string> received() const;
  // Sends `line\n` on every open connection (a reply the handler held back).
  void push(const std::string& line);

 private:
  void run();

  Handler handler_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::vector<std::string> received_;
  std::vector<std::string> pushes_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace lockd::testing
