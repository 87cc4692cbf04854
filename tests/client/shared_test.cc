// The C++ client's shared holds (`S`, v1.2) against a real lockd over TCP:
// readers share a key and a writer waits for all of them; a writer queued
// first makes later readers wait (one FIFO queue); a semaphore caps its
// holders at N and hands a freed permit to the next waiter; the limit is
// the key's; each holder's keeper extends its own lease.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "eventually.h"
#include "lockd/client/client.h"
#include "lockd_process.h"

namespace lockd::client {

void PrintTo(Code code, std::ostream* os);

namespace {

using namespace std::chrono_literals;
using testing::LockdProcess;
using testing::eventually;

Options options_for(std::uint16_t port) {
  Options o;
  o.addresses = {"127.0.0.1:" + std::to_string(port)};
  o.reply_timeout = 5s;
  o.jitter_seed = 1;
  return o;
}

Request req(Verb verb, std::string owner, std::string key, std::uint64_t wait_ms = 0,
            std::uint32_t limit = 0) {
  Request r;
  r.verb = verb;
  r.owner = std::move(owner);
  r.key = std::move(key);
  r.lease_ms = 10'000;
  r.wait_ms = wait_ms;
  r.limit = limit;
  return r;
}

TEST(ClientShared, ReadersShareAndAWriterQueuedFirstHoldsLaterReadersBack) {
  LockdProcess lockd;
  Client client(options_for(lockd.port()));
  auto r1 = client.lock_shared("r1", "cfg", {.lease_ms = 10'000});
  auto r2 = client.lock_shared("r2", "cfg", {.lease_ms = 10'000});
  ASSERT_TRUE(r1.ok()) << r1.status().to_string();
  ASSERT_TRUE(r2.ok()) << r2.status().to_string();
  EXPECT_GT(r2->token(), r1->token());  // every holder its own, larger token
  const std::uint64_t last_reader_token = r2->token();
  EXPECT_EQ(client.acquire("w0", "cfg", 1'000).code(), Code::kTimedOut);

  // On one connection the server sees them in this order: the writer
  // queues behind the two readers, and the reader after it waits too.
  auto opened = Connection::open(*parse_address("127.0.0.1:" + std::to_string(lockd.port())), 3s);
  ASSERT_TRUE(opened.ok());
  Connection& conn = *opened.value();
  const auto deadline = Clock::now() + 10s;
  auto writer = conn.submit(req(Verb::kAcquire, "w", "cfg", 10'000));
  auto late = conn.submit(req(Verb::kShared, "r3", "cfg", 0));
  ASSERT_TRUE(writer.ok() && late.ok());
  auto late_reply = conn.wait(late.value(), deadline);
  ASSERT_TRUE(late_reply.ok());
  EXPECT_EQ(late_reply->kind, ReplyKind::kTimedOut);  // someone is queued first

  // One reader leaving is not enough; the last one hands the key over.
  EXPECT_TRUE(r1->release().ok());
  EXPECT_EQ(client.acquire_shared("r4", "cfg", 0, 1'000).code(), Code::kTimedOut);
  EXPECT_TRUE(r2->release().ok());
  auto granted = conn.wait(writer.value(), deadline);
  ASSERT_TRUE(granted.ok());
  EXPECT_EQ(granted->kind, ReplyKind::kAcquired);
  EXPECT_GT(granted->token, last_reader_token);
  EXPECT_EQ(client.acquire_shared("r5", "cfg", 0, 1'000).code(), Code::kTimedOut);
  EXPECT_TRUE(client.release(granted->token, "cfg").ok());
  EXPECT_TRUE(client.acquire_shared("r5", "cfg", 0, 1'000).ok());
}

TEST(ClientShared, ASemaphoreCapsItsHoldersAndHandsAFreedPermitOn) {
  LockdProcess lockd;
  Client client(options_for(lockd.port()));
  Semaphore pool(client, "pool", 3);
  std::vector<SharedGuard> permits;
  for (int i = 0; i < 3; ++i) {
    auto p = pool.acquire("w" + std::to_string(i), {.lease_ms = 10'000});
    ASSERT_TRUE(p.ok()) << p.status().to_string();
    permits.push_back(std::move(p.value()));
  }
  EXPECT_EQ(pool.acquire("w3", {.lease_ms = 10'000}).code(), Code::kTimedOut);
  // Another limit on the key is refused while it has holders.
  EXPECT_EQ(client.acquire_shared("x", "pool", 4, 1'000).code(), Code::kLimitMismatch);
  EXPECT_EQ(client.acquire_shared("x", "pool", 0, 1'000).code(), Code::kLimitMismatch);

  // On one connection: the waiter queues (the pool is full), then a
  // permit's release hands that permit to it.
  auto opened = Connection::open(*parse_address("127.0.0.1:" + std::to_string(lockd.port())), 3s);
  ASSERT_TRUE(opened.ok());
  Connection& conn = *opened.value();
  const auto deadline = Clock::now() + 10s;
  auto waiter = conn.submit(req(Verb::kShared, "w3", "pool", 10'000, 3));
  Request release;
  release.verb = Verb::kRelease;
  release.token = permits[0].token();
  release.key = "pool";
  auto released = conn.submit(release);
  ASSERT_TRUE(waiter.ok() && released.ok());
  auto r = conn.wait(released.value(), deadline);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->kind, ReplyKind::kReleased);
  auto w = conn.wait(waiter.value(), deadline);
  ASSERT_TRUE(w.ok());
  EXPECT_EQ(w->kind, ReplyKind::kShared);
  EXPECT_EQ(permits[0].release().code, Code::kNotHeld);  // that holder left already
  EXPECT_EQ(pool.acquire("w4", {.lease_ms = 10'000}).code(), Code::kTimedOut);
  permits.clear();
  EXPECT_TRUE(client.release(w->token, "pool").ok());
  // Every holder gone: the key is deleted and takes any limit again.
  EXPECT_TRUE(client.acquire_shared("x", "pool", 4, 1'000).ok());
}

TEST(ClientShared, EachHoldersKeeperExtendsItsOwnLease) {
  LockdProcess lockd;
  Client client(options_for(lockd.port()));
  auto kept = client.lock_shared("kept", "k", 2, {.lease_ms = 400});
  auto left = client.lock_shared("left", "k", 2, {.lease_ms = 400, .keep = false});
  ASSERT_TRUE(kept.ok() && left.ok());
  // Past three leases: the unkept holder's lease ended, and an ended lease
  // does not count, so its permit is free; the kept one still counts.
  ASSERT_TRUE(eventually([&] { return kept->keeper()->kept_count() >= 4; }, 10s));
  EXPECT_FALSE(kept->lost()) << kept->keeper()->lost_reason().to_string();
  auto second = client.acquire_shared("new", "k", 2, 1'000);
  ASSERT_TRUE(second.ok()) << second.status().to_string();
  EXPECT_EQ(client.acquire_shared("third", "k", 2, 1'000).code(), Code::kTimedOut);
  EXPECT_TRUE(kept->release().ok());
  left->release();  // R or N: an ended lease not yet swept may still get R (§5b)
}

}  // namespace
}  // namespace lockd::client
