// The client's pure parts: request formatting and validation, reply
// parsing, and the Matcher that pairs pipelined replies with requests.
#include <gtest/gtest.h>

#include "lockd/client/client.h"
#include "lockd/client/connection.h"
#include "lockd/client/keeper.h"
#include "lockd/client/matcher.h"
#include "lockd/client/protocol.h"

namespace lockd::client {
namespace {

Request acquire(std::string owner, std::string key, std::uint64_t lease = 0,
                std::uint64_t wait = 0) {
  Request r;
  r.verb = Verb::kAcquire;
  r.owner = std::move(owner);
  r.key = std::move(key);
  r.lease_ms = lease;
  r.wait_ms = wait;
  return r;
}

Request by_token(Verb verb, std::uint64_t token, std::string key, std::uint64_t lease = 0) {
  Request r;
  r.verb = verb;
  r.token = token;
  r.key = std::move(key);
  r.lease_ms = lease;
  return r;
}

Request shared(std::string owner, std::string key, std::uint32_t limit, std::uint64_t lease = 0,
               std::uint64_t wait = 0) {
  Request r = acquire(std::move(owner), std::move(key), lease, wait);
  r.verb = Verb::kShared;
  r.limit = limit;
  return r;
}

Reply parse(const std::string& line) {
  auto r = parse_reply(line);
  EXPECT_TRUE(r.has_value()) << line;
  return r.value_or(Reply{});
}

TEST(ClientProtocol, FormatsEveryVerb) {
  EXPECT_EQ(format_request(acquire("o", "k")), "A o k\n");
  EXPECT_EQ(format_request(acquire("o", "k", 100)), "A o k 100\n");
  EXPECT_EQ(format_request(acquire("o", "k", 100, 5)), "A o k 100 5\n");
  EXPECT_EQ(format_request(by_token(Verb::kRelease, 7, "k")), "R 7 k\n");
  EXPECT_EQ(format_request(by_token(Verb::kKeep, 7, "k", 300)), "K 7 k 300\n");
  // `S owner key limit [lease [wait]]`: the limit is always sent (0: read lock).
  EXPECT_EQ(format_request(shared("o", "k", 0)), "S o k 0\n");
  EXPECT_EQ(format_request(shared("o", "k", 8, 100)), "S o k 8 100\n");
  EXPECT_EQ(format_request(shared("o", "k", 65535, 100, 5)), "S o k 65535 100 5\n");
}

TEST(ClientProtocol, ValidatesBeforeSending) {
  EXPECT_TRUE(validate(acquire("o", "k")).ok());
  EXPECT_EQ(validate(acquire("", "k")).code, Code::kInvalidArgument);
  EXPECT_EQ(validate(acquire("has space", "k")).code, Code::kInvalidArgument);
  EXPECT_EQ(validate(acquire(std::string(65, 'o'), "k")).code, Code::kInvalidArgument);
  EXPECT_EQ(validate(acquire("o", std::string(251, 'k'))).code, Code::kInvalidArgument);
  EXPECT_TRUE(validate(acquire("o", std::string(250, 'k'))).ok());
  EXPECT_EQ(validate(acquire("o", "k", 0, 10)).code, Code::kInvalidArgument);
  EXPECT_EQ(validate(by_token(Verb::kRelease, 0, "k")).code, Code::kInvalidArgument);
  EXPECT_EQ(validate(by_token(Verb::kKeep, 1, "k", 0)).code, Code::kInvalidArgument);
  EXPECT_TRUE(validate(shared("o", "k", 65535)).ok());
  EXPECT_EQ(validate(shared("o", "k", 65536)).code, Code::kInvalidArgument);
  EXPECT_EQ(validate(shared("", "k", 1)).code, Code::kInvalidArgument);
  EXPECT_EQ(validate(shared("o", "k", 1, 0, 10)).code, Code::kInvalidArgument);
}

TEST(ClientProtocol, ParsesEveryReply) {
  Reply a = parse("A 18446744073709551615 o k\r");
  EXPECT_EQ(a.kind, ReplyKind::kAcquired);
  EXPECT_EQ(a.token, 18446744073709551615ULL);
  EXPECT_EQ(a.owner, "o");
  EXPECT_EQ(a.key, "k");
  Reply s = parse("S 12 o k");
  EXPECT_EQ(s.kind, ReplyKind::kShared);
  EXPECT_TRUE(s.is_grant());
  EXPECT_EQ(s.token, 12u);
  EXPECT_EQ(s.owner, "o");
  EXPECT_FALSE(parse("T o k").is_grant());
  EXPECT_EQ(parse("T o k").kind, ReplyKind::kTimedOut);
  EXPECT_EQ(parse("B o k").kind, ReplyKind::kBusy);
  EXPECT_EQ(parse("R 5 k").kind, ReplyKind::kReleased);
  EXPECT_EQ(parse("N 5 k").kind, ReplyKind::kNotHeld);
  EXPECT_EQ(parse("K 5 k").kind, ReplyKind::kKept);
  Reply m = parse("M 10.0.0.2:7070 o k");
  EXPECT_EQ(m.leader, "10.0.0.2:7070");
  EXPECT_EQ(m.echo_first, "o");
  Reply e = parse("E no_leader 5 k");
  EXPECT_EQ(e.error_code, "no_leader");
  EXPECT_TRUE(e.has_echo());
  EXPECT_FALSE(parse("E bad_lease").has_echo());
  for (const char* bad : {"", "Q 1 k", "A 0 o k", "A x o k", "A 1 o", "R 1", "E", "M a o",
                          "AA 1 o k", "A 18446744073709551616 o k", "S 0 o k", "S 1 o"}) {
    EXPECT_FALSE(parse_reply(bad).has_value()) << bad;
  }
}

TEST(ClientProtocol, ParsesAddresses) {
  EXPECT_EQ(parse_address("127.0.0.1:7070"), (Address{"127.0.0.1", 7070}));
  EXPECT_EQ(parse_address("[::1]:1"), (Address{"::1", 1}));
  EXPECT_EQ(parse_address("[::1]:1")->to_string(), "[::1]:1");
  for (const char* bad : {"", "host", ":80", "h:0", "h:65536", "h:x"}) {
    EXPECT_FALSE(parse_address(bad).has_value()) << bad;
  }
}

TEST(Matcher, MatchesOutOfOrderRepliesByEcho) {
  Matcher m;
  ASSERT_TRUE(m.add(1, acquire("a", "k1", 100, 5000)).ok());  // will wait
  ASSERT_TRUE(m.add(2, acquire("b", "k2", 100)).ok());
  ASSERT_TRUE(m.add(3, by_token(Verb::kRelease, 9, "k1")).ok());
  EXPECT_EQ(m.match(parse("A 11 b k2"))->id, 2u);
  EXPECT_EQ(m.match(parse("R 9 k1"))->id, 3u);
  EXPECT_EQ(m.match(parse("A 12 a k1"))->id, 1u);
  EXPECT_EQ(m.in_flight(), 0u);
  EXPECT_FALSE(m.match(parse("A 13 a k1")).has_value());  // nothing in flight
}

// C10, the matcher's part: one connection, one owner, one key: a second
// acquire in flight is refused with kInFlight (its replies could not be
// told apart); Client::call() then holds it back (plan_test.cc).
TEST(ClientPlanUnit, C10_MatcherRefusesASecondAcquireInFlight) {
  Matcher m;
  ASSERT_TRUE(m.add(1, acquire("a", "k", 100, 5000)).ok());
  EXPECT_EQ(m.add(2, acquire("a", "k", 100)).code, Code::kInFlight);
  EXPECT_TRUE(m.add(3, acquire("b", "k", 100)).ok());
  m.match(parse("T a k"));
  EXPECT_TRUE(m.add(4, acquire("a", "k", 100)).ok());
}

TEST(Matcher, SharedAcquiresShareTheAcquireEcho) {
  Matcher m;
  ASSERT_TRUE(m.add(1, shared("a", "k", 0, 100, 5000)).ok());
  // An A and an S of one owner and key would draw indistinguishable T/B.
  EXPECT_EQ(m.add(2, acquire("a", "k", 100)).code, Code::kInFlight);
  EXPECT_EQ(m.add(3, shared("a", "k", 0, 100)).code, Code::kInFlight);
  ASSERT_TRUE(m.add(4, shared("b", "k", 3, 100)).ok());
  EXPECT_EQ(m.match(parse("E limit_mismatch b k"))->id, 4u);
  EXPECT_EQ(m.match(parse("S 7 a k"))->id, 1u);
  // A bad_limit (no echo) can only come from an S; bad_wait only from a wait.
  ASSERT_TRUE(m.add(5, by_token(Verb::kRelease, 5, "x")).ok());
  ASSERT_TRUE(m.add(6, shared("c", "k", 2, 100, 50)).ok());
  EXPECT_EQ(m.match(parse("E bad_limit"))->id, 6u);  // the one S in flight
  ASSERT_TRUE(m.add(7, shared("d", "k", 2, 100, 50)).ok());
  EXPECT_EQ(m.match(parse("E bad_wait"))->id, 7u);  // the one wait in flight
  EXPECT_EQ(m.match(parse("R 5 x"))->id, 5u);
}

TEST(Matcher, ReleasesAndKeepsOfOneTokenInOrderByVerb) {
  Matcher m;
  ASSERT_TRUE(m.add(1, by_token(Verb::kKeep, 5, "k", 100)).ok());
  ASSERT_TRUE(m.add(2, by_token(Verb::kRelease, 5, "k")).ok());
  ASSERT_TRUE(m.add(3, by_token(Verb::kKeep, 5, "k", 100)).ok());
  EXPECT_EQ(m.match(parse("R 5 k"))->id, 2u);  // an R answers the release
  EXPECT_EQ(m.match(parse("N 5 k"))->id, 1u);  // N: the oldest of the rest
  EXPECT_EQ(m.match(parse("K 5 k"))->id, 3u);
}

TEST(Matcher, EchoOfRedirectsAndErrorsFindsEitherKind) {
  Matcher m;
  ASSERT_TRUE(m.add(1, acquire("o", "k", 100)).ok());
  ASSERT_TRUE(m.add(2, by_token(Verb::kRelease, 42, "k")).ok());
  EXPECT_EQ(m.match(parse("M 1.2.3.4:1 42 k"))->id, 2u);
  EXPECT_EQ(m.match(parse("E indeterminate o k"))->id, 1u);
  // An owner that looks like a token: the acquire reading comes first.
  ASSERT_TRUE(m.add(3, acquire("42", "k", 100)).ok());
  ASSERT_TRUE(m.add(4, by_token(Verb::kRelease, 42, "k")).ok());
  EXPECT_EQ(m.match(parse("E no_leader 42 k"))->id, 3u);
  EXPECT_EQ(m.match(parse("E no_leader 42 k"))->id, 4u);
}

// C03: v1.3 range errors carry the echo (§7) and answer the request they name,
// whatever was pipelined before it.
TEST(ClientPlanUnit, C03_ErrorWithEchoAmongPipelined) {
  Matcher m;
  ASSERT_TRUE(m.add(1, acquire("a", "k", 100, 5000)).ok());  // queued at the server
  ASSERT_TRUE(m.add(2, by_token(Verb::kKeep, 9, "held", 100)).ok());
  ASSERT_TRUE(m.add(3, acquire("b", "k", 100, 999999)).ok());  // above the server's max wait
  ASSERT_TRUE(m.add(4, shared("c", "s", 3, 100)).ok());
  ASSERT_TRUE(m.add(5, by_token(Verb::kKeep, 10, "held2", 99999999)).ok());
  EXPECT_EQ(m.match(parse("E bad_wait b k"))->id, 3u);
  EXPECT_EQ(m.match(parse("E bad_lease 10 held2"))->id, 5u);
  EXPECT_EQ(m.match(parse("E bad_limit c s"))->id, 4u);
  EXPECT_EQ(m.match(parse("K 9 held"))->id, 2u);
  EXPECT_EQ(m.match(parse("A 77 a k"))->id, 1u);
  EXPECT_EQ(m.in_flight(), 0u);
}

// C04: without an echo (a v1.2 server) an error is pinned on a request only
// when exactly one in flight could have drawn it; otherwise it matches
// nothing (a keeper's keep or a queued acquire is never blamed) and is
// marked unattributable, so the connection is not torn down for it.
TEST(ClientPlanUnit, C04_ErrorWithoutEchoIsNeverPinnedOnAnother) {
  Matcher m;
  ASSERT_TRUE(m.add(1, acquire("a", "k", 100, 5000)).ok());      // validly queued
  ASSERT_TRUE(m.add(2, by_token(Verb::kKeep, 5, "x", 100)).ok());  // a keeper's keep
  ASSERT_TRUE(m.add(3, acquire("b", "k", 100, 999999)).ok());     // drew the error
  const Reply bad_wait = parse("E bad_wait");
  EXPECT_FALSE(m.match(bad_wait).has_value());  // 1 and 3 could have: no guess
  EXPECT_TRUE(Matcher::unattributable(bad_wait));
  EXPECT_EQ(m.candidates(bad_wait), (std::vector<Matcher::Id>{1, 3}));  // the keep is not one
  EXPECT_EQ(m.candidates(parse("E bad_limit")), std::vector<Matcher::Id>{});
  EXPECT_FALSE(m.match(parse("E bad_lease")).has_value());  // 1, 2 and 3 could have
  EXPECT_EQ(m.in_flight(), 3u);  // nobody was failed
  EXPECT_EQ(m.match(parse("K 5 x"))->id, 2u);
  EXPECT_EQ(m.match(parse("A 8 a k"))->id, 1u);
  // Exactly one candidate left (3): now it is that one's.
  EXPECT_EQ(m.match(parse("E bad_wait"))->id, 3u);
  // A release has no lease or wait: a bad_lease with only releases in
  // flight is nobody's.
  ASSERT_TRUE(m.add(4, by_token(Verb::kRelease, 5, "x")).ok());
  ASSERT_TRUE(m.add(5, by_token(Verb::kKeep, 6, "y", 100)).ok());
  EXPECT_EQ(m.match(parse("E bad_lease"))->id, 5u);
  EXPECT_FALSE(m.match(parse("E bad_wait")).has_value());
  EXPECT_FALSE(Matcher::unattributable(parse("E bad_wait 5 x")));  // has an echo
}

// C11: push lines (`V`, `X`) are never replies, whatever is in flight.
TEST(ClientPlanUnit, C11_PushesAreNeverTakenAsReplies) {
  Matcher m;
  ASSERT_TRUE(m.add(1, acquire("a", "k", 100, 5000)).ok());
  ASSERT_TRUE(m.add(2, by_token(Verb::kRelease, 5, "k")).ok());
  ASSERT_TRUE(m.add(3, Request{Verb::kWatch, "", "k"}).ok());
  const Reply v = parse("V k 12 held a 77");
  EXPECT_TRUE(v.is_push());
  EXPECT_EQ(v.state.kind, KeyState::Kind::kHeld);
  EXPECT_EQ(v.state.owner, "a");
  EXPECT_EQ(v.state.token, 77u);
  EXPECT_EQ(v.rev, 12u);
  EXPECT_FALSE(m.match(v).has_value());
  const Reply x = parse("X 5 k");
  EXPECT_TRUE(x.is_push());
  EXPECT_EQ(x.token, 5u);
  EXPECT_FALSE(m.match(x).has_value());
  EXPECT_EQ(m.in_flight(), 3u);
  const Reply w = parse("W k 11 shared 3 2");
  EXPECT_EQ(w.kind, ReplyKind::kWatching);
  EXPECT_EQ(w.state.kind, KeyState::Kind::kShared);
  EXPECT_EQ(w.state.limit, 3u);
  EXPECT_EQ(w.state.count, 2u);
  EXPECT_EQ(m.match(w)->id, 3u);
  EXPECT_EQ(m.match(parse("R 5 k"))->id, 2u);
  EXPECT_EQ(m.match(parse("A 9 a k"))->id, 1u);
  // Refusals of a `W` echo the key alone (§5c).
  ASSERT_TRUE(m.add(4, Request{Verb::kWatch, "", "k2"}).ok());
  ASSERT_TRUE(m.add(5, Request{Verb::kUnwatch, "", "k2"}).ok());
  EXPECT_EQ(m.match(parse("U k2"))->id, 5u);
  EXPECT_EQ(m.match(parse("B k2"))->id, 4u);
  for (const char* bad : {"V k 0 free", "V k 1 held a", "V k 1 shared 1 0", "X 0 k", "V k 1 gone"}) {
    EXPECT_FALSE(parse_reply(bad).has_value()) << bad;
  }
}

using namespace std::chrono_literals;

// C02: a confirmed `K` dates the lease's safe end from when that `K` was
// sent, never from when its reply arrived (injected times).
TEST(ClientPlanUnit, C02_KeepSafeEndIsDatedFromTheSend) {
  const Clock::time_point t0{};
  const auto t = [&](int ms) { return t0 + std::chrono::milliseconds(1'000'000 + ms); };
  LeaseSchedule s(t(0), 3000ms);
  EXPECT_EQ(s.safe_end(), t(3000));
  EXPECT_EQ(s.next_keep(), t(1000));
  s.kept(t(1000), t(1900));  // a slow reply
  EXPECT_EQ(s.safe_end(), t(4000));  // not t(4900)
  EXPECT_EQ(s.next_keep(), t(2000));
  s.kept(t(2000), t(3500));  // the reply came after the next keep was due
  EXPECT_EQ(s.safe_end(), t(5000));
  EXPECT_EQ(s.next_keep(), t(3500));  // at once
  EXPECT_FALSE(s.ended(t(4999)));
  EXPECT_TRUE(s.ended(t(5000)));
  s.retry(t(4950));  // transient failures never push the next try past the end
  EXPECT_EQ(s.next_keep(), t(5000));
}

// C01 (the rule; the real-server run is in plan_test.cc): a grant after a
// wait dates its lease from the grant's arrival, one without a wait from
// the send.
TEST(ClientPlanUnit, C01_LeaseOfAWaitedGrantIsDatedFromItsArrival) {
  Lock waited;
  waited.sent_at = Clock::time_point{} + 10s;
  waited.granted_at = waited.sent_at + 3s;
  waited.wait_ms = 10'000;
  waited.lease_ms = 2'000;
  EXPECT_EQ(LeaseSchedule::lease_from(waited), waited.granted_at);
  LeaseSchedule s(LeaseSchedule::lease_from(waited), 2000ms);
  EXPECT_FALSE(s.ended(waited.granted_at + 1s));  // dated from the send, it had ended
  Lock at_once = waited;
  at_once.wait_ms = 0;
  EXPECT_EQ(LeaseSchedule::lease_from(at_once), at_once.sent_at);
}

TEST(Matcher, DrainReturnsEverythingInWireOrder) {
  Matcher m;
  ASSERT_TRUE(m.add(7, acquire("a", "k")).ok());
  ASSERT_TRUE(m.add(8, by_token(Verb::kRelease, 1, "k")).ok());
  EXPECT_EQ(m.drain(), (std::vector<Matcher::Id>{7, 8}));
  EXPECT_EQ(m.in_flight(), 0u);
  EXPECT_TRUE(m.add(9, acquire("a", "k")).ok());
}

}  // namespace
}  // namespace lockd::client
