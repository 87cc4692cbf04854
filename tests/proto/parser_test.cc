// The request parser against protocol.md §2, §3 and §7.
#include "lockd/proto/parser.h"
#include "lockd/proto/reply.h"

#include <gtest/gtest.h>

#include <string>

namespace lockd::proto {
namespace {

const ParseLimits kLimits{30'000, 3'600'000, 300'000};

ParseResult parse(std::string_view line) { return parse_line(line, kLimits); }

ParseError error_of(std::string_view line) {
  auto r = parse(line);
  EXPECT_TRUE(std::holds_alternative<ParseError>(r)) << "line: " << line;
  return std::holds_alternative<ParseError>(r) ? std::get<ParseError>(r)
                                               : ParseError::kLineTooLong;
}

Request request_of(std::string_view line) {
  auto r = parse(line);
  EXPECT_TRUE(std::holds_alternative<Request>(r)) << "line: " << line;
  return std::holds_alternative<Request>(r) ? std::get<Request>(r) : Request{};
}

TEST(ParserTest, AcquireWithDefaults) {
  Request r = request_of("A alice orders/42");
  EXPECT_EQ(r.verb, Verb::kAcquire);
  EXPECT_EQ(r.owner, "alice");
  EXPECT_EQ(r.key, "orders/42");
  EXPECT_EQ(r.lease_ms, 30'000u);
  EXPECT_EQ(r.wait_ms, 0u);
}

TEST(ParserTest, AcquireWithLeaseAndWait) {
  Request r = request_of("A alice k 5000 250");
  EXPECT_EQ(r.lease_ms, 5000u);
  EXPECT_EQ(r.wait_ms, 250u);
}

TEST(ParserTest, ReleaseParsesToken) {
  Request r = request_of("R 18446744073709551615 k");
  EXPECT_EQ(r.verb, Verb::kRelease);
  EXPECT_EQ(r.token, 18446744073709551615ull);
  EXPECT_EQ(r.key, "k");
}

TEST(ParserTest, RunsOfSpacesAndCrAreSeparatorsAndTerminator) {
  Request r = request_of("  A   alice    k  100   7  \r");
  EXPECT_EQ(r.owner, "alice");
  EXPECT_EQ(r.key, "k");
  EXPECT_EQ(r.lease_ms, 100u);
  EXPECT_EQ(r.wait_ms, 7u);
}

TEST(ParserTest, BlankLinesAreIgnored) {
  EXPECT_TRUE(std::holds_alternative<Blank>(parse("")));
  EXPECT_TRUE(std::holds_alternative<Blank>(parse("    ")));
  EXPECT_TRUE(std::holds_alternative<Blank>(parse("\r")));
}

TEST(ParserTest, UnknownCommand) {
  EXPECT_EQ(error_of("X a b"), ParseError::kUnknownCommand);
  EXPECT_EQ(error_of("a alice k"), ParseError::kUnknownCommand);  // verbs are upper case
  EXPECT_EQ(error_of("AA alice k"), ParseError::kUnknownCommand);
  EXPECT_EQ(error_of("A\talice k"), ParseError::kUnknownCommand);  // tab is not a separator
}

TEST(ParserTest, BadArity) {
  EXPECT_EQ(error_of("A"), ParseError::kBadArity);
  EXPECT_EQ(error_of("A alice"), ParseError::kBadArity);
  EXPECT_EQ(error_of("A alice k 1 2 3"), ParseError::kBadArity);
  EXPECT_EQ(error_of("R 1"), ParseError::kBadArity);
  EXPECT_EQ(error_of("R 1 k extra"), ParseError::kBadArity);
  EXPECT_EQ(error_of("R"), ParseError::kBadArity);
}

TEST(ParserTest, OwnerLengthBoundary) {
  EXPECT_EQ(request_of("A " + std::string(64, 'o') + " k").owner.size(), 64u);
  EXPECT_EQ(error_of("A " + std::string(65, 'o') + " k"), ParseError::kBadOwner);
}

TEST(ParserTest, KeyLengthBoundary) {
  EXPECT_EQ(request_of("A o " + std::string(250, 'k')).key.size(), 250u);
  EXPECT_EQ(error_of("A o " + std::string(251, 'k')), ParseError::kBadKey);
  EXPECT_EQ(error_of("R 1 " + std::string(251, 'k')), ParseError::kBadKey);
}

TEST(ParserTest, FieldBytesMustBeVisibleAscii) {
  EXPECT_EQ(error_of(std::string("A al\x01ice k")), ParseError::kBadOwner);
  EXPECT_EQ(error_of(std::string("A alice k\x7f")), ParseError::kBadKey);
  EXPECT_EQ(error_of(std::string("A alice k\xc3\xa9")), ParseError::kBadKey);
  EXPECT_EQ(error_of(std::string("A alice k\r\r")), ParseError::kBadKey);
  EXPECT_EQ(request_of("A !~ ~!").owner, "!~");
}

TEST(ParserTest, LeaseRange) {
  EXPECT_EQ(error_of("A o k 0"), ParseError::kBadLease);
  EXPECT_EQ(request_of("A o k 1").lease_ms, 1u);
  EXPECT_EQ(request_of("A o k 3600000").lease_ms, 3'600'000u);
  EXPECT_EQ(error_of("A o k 3600001"), ParseError::kBadLease);
  EXPECT_EQ(error_of("A o k -1"), ParseError::kBadLease);
  EXPECT_EQ(error_of("A o k +1"), ParseError::kBadLease);
  EXPECT_EQ(error_of("A o k 1.5"), ParseError::kBadLease);
  EXPECT_EQ(error_of("A o k 1e3"), ParseError::kBadLease);
  EXPECT_EQ(request_of("A o k 000042").lease_ms, 42u);  // leading zeros are fine
}

TEST(ParserTest, WaitRange) {
  EXPECT_EQ(request_of("A o k 1 0").wait_ms, 0u);
  EXPECT_EQ(request_of("A o k 1 300000").wait_ms, 300'000u);
  EXPECT_EQ(error_of("A o k 1 300001"), ParseError::kBadWait);
  EXPECT_EQ(error_of("A o k 1 x"), ParseError::kBadWait);
}

TEST(ParserTest, TokenRange) {
  EXPECT_EQ(error_of("R 0 k"), ParseError::kBadToken);
  EXPECT_EQ(error_of("R 000 k"), ParseError::kBadToken);
  EXPECT_EQ(request_of("R 0001 k").token, 1u);
  EXPECT_EQ(request_of("R 18446744073709551615 k").token, 18446744073709551615ull);
  EXPECT_EQ(error_of("R 18446744073709551616 k"), ParseError::kBadToken);
  EXPECT_EQ(error_of("R 99999999999999999999999 k"), ParseError::kBadToken);
  EXPECT_EQ(error_of("R -1 k"), ParseError::kBadToken);
  EXPECT_EQ(error_of("R +1 k"), ParseError::kBadToken);
  EXPECT_EQ(error_of("R abc k"), ParseError::kBadToken);
}

TEST(ParserTest, FirstBadFieldLeftToRightNamesTheError) {
  EXPECT_EQ(error_of("A " + std::string(65, 'o') + " " + std::string(251, 'k') + " 0 x"),
            ParseError::kBadOwner);
  EXPECT_EQ(error_of("A o " + std::string(251, 'k') + " 0 x"), ParseError::kBadKey);
  EXPECT_EQ(error_of("A o k 0 x"), ParseError::kBadLease);
  EXPECT_EQ(error_of("R 0 " + std::string(251, 'k')), ParseError::kBadToken);
}

TEST(ParserTest, ErrorCodesSpellTheWireNames) {
  EXPECT_EQ(error_code(ParseError::kUnknownCommand), "unknown_command");
  EXPECT_EQ(error_code(ParseError::kBadArity), "bad_arity");
  EXPECT_EQ(error_code(ParseError::kBadOwner), "bad_owner");
  EXPECT_EQ(error_code(ParseError::kBadKey), "bad_key");
  EXPECT_EQ(error_code(ParseError::kBadLease), "bad_lease");
  EXPECT_EQ(error_code(ParseError::kBadWait), "bad_wait");
  EXPECT_EQ(error_code(ParseError::kBadToken), "bad_token");
  EXPECT_EQ(error_code(ParseError::kLineTooLong), "line_too_long");
}

// The reply to a malformed line as the server writes it (v1.3 §7).
std::string error_reply(std::string_view line) {
  std::string out;
  append_error(out, error_of(line), line);
  return out;
}

TEST(ParserTest, RangeErrorsEchoTheRequestWhenItsEchoFieldsAreValid) {
  EXPECT_EQ(error_reply("A alice orders/42 0"), "E bad_lease alice orders/42\n");
  EXPECT_EQ(error_reply("A  alice   orders/42 10 300001"), "E bad_wait alice orders/42\n");
  EXPECT_EQ(error_reply("A alice orders/42 10 300001\r"), "E bad_wait alice orders/42\n");
  EXPECT_EQ(error_reply("S r k 65536"), "E bad_limit r k\n");
  EXPECT_EQ(error_reply("S r k 1 0"), "E bad_lease r k\n");
  EXPECT_EQ(error_reply("S r k 1 1 x"), "E bad_wait r k\n");
  // `K` echoes `<token> <key>`, the token in plain decimal as in `R`/`N`/`K`.
  EXPECT_EQ(error_reply("K 0042 k 0"), "E bad_lease 42 k\n");
  EXPECT_EQ(error_reply("K 42 k 3600001"), "E bad_lease 42 k\n");
  // Every other code keeps its bare form: an echo field is the bad one, or
  // the line has no request shape to echo.
  EXPECT_EQ(error_reply("A " + std::string(65, 'o') + " k 0"), "E bad_owner\n");
  EXPECT_EQ(error_reply("A o " + std::string(251, 'k') + " 0"), "E bad_key\n");
  EXPECT_EQ(error_reply("K 0 k 0"), "E bad_token\n");
  EXPECT_EQ(error_reply("K 1 k"), "E bad_arity\n");
  EXPECT_EQ(error_reply("R 0 k"), "E bad_token\n");
  EXPECT_EQ(error_reply("Q o k 0"), "E unknown_command\n");
}

TEST(ParserTest, ConfiguredLimitsApply) {
  ParseLimits small{10, 20, 5};
  EXPECT_EQ(std::get<Request>(parse_line("A o k", small)).lease_ms, 10u);
  EXPECT_TRUE(std::holds_alternative<ParseError>(parse_line("A o k 21", small)));
  EXPECT_TRUE(std::holds_alternative<ParseError>(parse_line("A o k 20 6", small)));
}

// --- `K <token> <key> <lease_ms>` (v1.1, §3, §6a, §7) ---

TEST(ParserTest, KeepParsesTokenKeyLease) {
  Request r = request_of("K 18446744073709551615 orders/42 5000");
  EXPECT_EQ(r.verb, Verb::kKeep);
  EXPECT_EQ(r.token, 18446744073709551615ull);
  EXPECT_EQ(r.key, "orders/42");
  EXPECT_EQ(r.lease_ms, 5000u);
  Request spaced = request_of("  K   7  k   1 \r");
  EXPECT_EQ(spaced.token, 7u);
  EXPECT_EQ(spaced.key, "k");
  EXPECT_EQ(spaced.lease_ms, 1u);
}

TEST(ParserTest, KeepArityIsExactlyThreeFields) {
  EXPECT_EQ(error_of("K"), ParseError::kBadArity);
  EXPECT_EQ(error_of("K 1"), ParseError::kBadArity);
  EXPECT_EQ(error_of("K 1 k"), ParseError::kBadArity);  // the lease has no default
  EXPECT_EQ(error_of("K 1 k 100 5"), ParseError::kBadArity);
  EXPECT_EQ(error_of("K 1 k 100 5 6"), ParseError::kBadArity);
  EXPECT_EQ(error_of("K 0 k"), ParseError::kBadArity);  // arity before fields
  EXPECT_EQ(error_of("k 1 k 100"), ParseError::kUnknownCommand);  // upper case only
  EXPECT_EQ(error_of("KK 1 k 100"), ParseError::kUnknownCommand);
}

TEST(ParserTest, KeepBadToken) {
  EXPECT_EQ(error_of("K 0 k 100"), ParseError::kBadToken);
  EXPECT_EQ(error_of("K -1 k 100"), ParseError::kBadToken);
  EXPECT_EQ(error_of("K +1 k 100"), ParseError::kBadToken);
  EXPECT_EQ(error_of("K abc k 100"), ParseError::kBadToken);
  EXPECT_EQ(error_of("K 18446744073709551616 k 100"), ParseError::kBadToken);
  EXPECT_EQ(request_of("K 0001 k 100").token, 1u);
}

TEST(ParserTest, KeepBadKey) {
  EXPECT_EQ(request_of("K 1 " + std::string(250, 'k') + " 100").key.size(), 250u);
  EXPECT_EQ(error_of("K 1 " + std::string(251, 'k') + " 100"), ParseError::kBadKey);
  EXPECT_EQ(error_of(std::string("K 1 k\x7f 100")), ParseError::kBadKey);
  EXPECT_EQ(error_of(std::string("K 1 k\xc3\xa9 100")), ParseError::kBadKey);
}

TEST(ParserTest, KeepBadLeaseUsesTheAcquireBounds) {
  EXPECT_EQ(error_of("K 1 k 0"), ParseError::kBadLease);
  EXPECT_EQ(request_of("K 1 k 3600000").lease_ms, 3'600'000u);
  EXPECT_EQ(error_of("K 1 k 3600001"), ParseError::kBadLease);
  EXPECT_EQ(error_of("K 1 k -5"), ParseError::kBadLease);
  EXPECT_EQ(error_of("K 1 k 1.5"), ParseError::kBadLease);
  EXPECT_EQ(error_of("K 1 k x"), ParseError::kBadLease);
  EXPECT_EQ(request_of("K 1 k 000042").lease_ms, 42u);
  const ParseLimits small{10, 20, 5};
  EXPECT_EQ(std::get<ParseError>(parse_line("K 1 k 21", small)), ParseError::kBadLease);
  EXPECT_EQ(std::get<Request>(parse_line("K 1 k 20", small)).lease_ms, 20u);
}

TEST(ParserTest, KeepFieldsAreCheckedTokenKeyLease) {
  const std::string long_key(251, 'k');
  EXPECT_EQ(error_of("K 0 " + long_key + " 0"), ParseError::kBadToken);
  EXPECT_EQ(error_of("K 1 " + long_key + " 0"), ParseError::kBadKey);
  EXPECT_EQ(error_of("K 1 k 0"), ParseError::kBadLease);
  EXPECT_EQ(error_of("K x " + long_key + " x"), ParseError::kBadToken);
  // Fields in another order: each position is read as its own field.
  EXPECT_EQ(error_of("K k 5 100"), ParseError::kBadToken);   // key first
  EXPECT_EQ(error_of("K 5 100 k"), ParseError::kBadLease);   // lease before key
  EXPECT_EQ(request_of("K 5 100 200").key, "100");
}

// --- `S` (v1.2, §3, §5b, §7) ---

TEST(ParserTest, SharedWithDefaults) {
  Request r = request_of("S reader cfg/main 0");
  EXPECT_EQ(r.verb, Verb::kShared);
  EXPECT_EQ(r.owner, "reader");
  EXPECT_EQ(r.key, "cfg/main");
  EXPECT_EQ(r.limit, 0u);
  EXPECT_EQ(r.lease_ms, 30'000u);
  EXPECT_EQ(r.wait_ms, 0u);
  EXPECT_TRUE(r.echoes_owner());
}

TEST(ParserTest, SharedWithLimitLeaseAndWait) {
  Request r = request_of("  S  w pool 8 5000 250 \r");
  EXPECT_EQ(r.limit, 8u);
  EXPECT_EQ(r.lease_ms, 5000u);
  EXPECT_EQ(r.wait_ms, 250u);
}

TEST(ParserTest, SharedArityIsThreeToFiveFields) {
  EXPECT_EQ(error_of("S"), ParseError::kBadArity);
  EXPECT_EQ(error_of("S o"), ParseError::kBadArity);
  EXPECT_EQ(error_of("S o k"), ParseError::kBadArity);  // the limit is required
  EXPECT_EQ(error_of("S o k 1 2 3 4"), ParseError::kBadArity);
  EXPECT_EQ(error_of("S o k 1 2 3 4 5 6 7"), ParseError::kBadArity);
}

TEST(ParserTest, SharedLimitRange) {
  EXPECT_EQ(request_of("S o k 65535").limit, 65535u);
  EXPECT_EQ(request_of("S o k 00007").limit, 7u);
  EXPECT_EQ(error_of("S o k 65536"), ParseError::kBadLimit);
  EXPECT_EQ(error_of("S o k -1"), ParseError::kBadLimit);
  EXPECT_EQ(error_of("S o k +1"), ParseError::kBadLimit);
  EXPECT_EQ(error_of("S o k x"), ParseError::kBadLimit);
  EXPECT_EQ(error_of("S o k 18446744073709551616"), ParseError::kBadLimit);
}

TEST(ParserTest, SharedLeaseAndWaitUseTheAcquireBounds) {
  EXPECT_EQ(error_of("S o k 0 0"), ParseError::kBadLease);
  EXPECT_EQ(error_of("S o k 0 3600001"), ParseError::kBadLease);
  EXPECT_EQ(request_of("S o k 0 3600000 300000").wait_ms, 300'000u);
  EXPECT_EQ(error_of("S o k 0 1 300001"), ParseError::kBadWait);
}

TEST(ParserTest, SharedFieldsAreCheckedOwnerKeyLimitLeaseWait) {
  const std::string long_owner(65, 'o');
  EXPECT_EQ(error_of("S " + long_owner + " \x01 x 0 x"), ParseError::kBadOwner);
  EXPECT_EQ(error_of("S o \x01 x 0 x"), ParseError::kBadKey);
  EXPECT_EQ(error_of("S o k x 0 x"), ParseError::kBadLimit);
  EXPECT_EQ(error_of("S o k 1 0 x"), ParseError::kBadLease);
  EXPECT_EQ(error_of("S o k 1 1 x"), ParseError::kBadWait);
  EXPECT_EQ(error_code(ParseError::kBadLimit), "bad_limit");
}

TEST(ParserTest, SharedVerbIsUpperCaseOnly) {
  EXPECT_EQ(error_of("s o k 0"), ParseError::kUnknownCommand);
}

}  // namespace
}  // namespace lockd::proto

namespace lockd::proto {
namespace {

TEST(ParserTest, HelloTakesExactlyOneCredential) {
  Request r = request_of("H s3cr3t-token_XYZ");
  EXPECT_EQ(r.verb, Verb::kHello);
  EXPECT_EQ(r.credential, "s3cr3t-token_XYZ");
  EXPECT_EQ(request_of("H " + std::string(512, 'c')).credential.size(), 512u);
  EXPECT_EQ(error_of("H"), ParseError::kBadArity);
  EXPECT_EQ(error_of("H a b"), ParseError::kBadArity);
  // A credential that breaks §2 is `E unauthenticated` (then closed), not bad_arity.
  EXPECT_EQ(error_of("H " + std::string(513, 'c')), ParseError::kBadCredential);
  EXPECT_EQ(error_of(std::string("H tok\x01")), ParseError::kBadCredential);
  EXPECT_EQ(error_of(std::string("H tok\xc3\xa9")), ParseError::kBadCredential);
  EXPECT_EQ(error_code(ParseError::kBadCredential), "unauthenticated");
  EXPECT_EQ(error_of("h token"), ParseError::kUnknownCommand);
}

}  // namespace
}  // namespace lockd::proto

namespace lockd::proto {
namespace {

TEST(ParserTest, WatchAndUnwatchTakeExactlyOneKey) {
  Request w = request_of("W  elections/db \r");
  EXPECT_EQ(w.verb, Verb::kWatch);
  EXPECT_EQ(w.key, "elections/db");
  EXPECT_TRUE(w.echoes_key_only());
  Request u = request_of("U k");
  EXPECT_EQ(u.verb, Verb::kUnwatch);
  EXPECT_EQ(u.key, "k");
  EXPECT_EQ(error_of("W"), ParseError::kBadArity);
  EXPECT_EQ(error_of("W a b"), ParseError::kBadArity);
  EXPECT_EQ(error_of("U"), ParseError::kBadArity);
  EXPECT_EQ(error_of("U a 1"), ParseError::kBadArity);
  EXPECT_EQ(error_of("W " + std::string(251, 'k')), ParseError::kBadKey);
  EXPECT_EQ(request_of("W " + std::string(250, 'k')).key.size(), 250u);
  EXPECT_EQ(error_of("W k\x7f"), ParseError::kBadKey);
  EXPECT_EQ(error_of("V k 1 free"), ParseError::kUnknownCommand);  // pushes are not requests
  EXPECT_EQ(error_of("X 1 k"), ParseError::kUnknownCommand);
  EXPECT_EQ(error_of("w k"), ParseError::kUnknownCommand);
}

}  // namespace
}  // namespace lockd::proto
