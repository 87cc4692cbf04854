// A parsed client request and the parse errors of the text protocol (§3, §7).
#pragma once

#include <cstdint>
#include <string_view>

namespace lockd::proto {

enum class Verb : std::uint8_t {
  kAcquire,  // `A <owner> <key> [<lease_ms> [<wait_ms>]]`
  kRelease,  // `R <token> <key>`
  kKeep,     // `K <token> <key> <lease_ms>` (v1.1): extend a held lease
  kHello,    // `H <credential>` (v1.2, §11): authenticate the connection
  kShared,   // `S <owner> <key> <limit> [<lease_ms> [<wait_ms>]]` (v1.2, §5b)
  kWatch,    // `W <key>` (v1.3, §5c): its state now, then a `V` push at every change
  kUnwatch,  // `U <key>` (v1.3, §5c): stop watching key
};

// A well-formed request. Views point into the line it was parsed from.
struct Request {
  Verb verb;
  std::string_view owner;     // kAcquire, kShared
  std::string_view key;       // kAcquire, kShared, kRelease, kKeep, kWatch, kUnwatch
  std::uint64_t lease_ms = 0; // kAcquire, kShared (the server default when omitted), kKeep (required)
  std::uint64_t wait_ms = 0;  // kAcquire, kShared
  std::uint64_t token = 0;    // kRelease, kKeep
  std::uint16_t limit = 0;    // kShared: most shared holders, 0 = no cap
  std::string_view credential;  // kHello

  // `A` and `S` echo `<owner> <key>`; `R` and `K` echo `<token> <key>`;
  // `W` and `U` echo `<key>` alone.
  bool echoes_owner() const { return verb == Verb::kAcquire || verb == Verb::kShared; }
  bool echoes_key_only() const { return verb == Verb::kWatch || verb == Verb::kUnwatch; }
};

// Why a line is not a request; each maps to one `E <code>` of §7.
enum class ParseError : std::uint8_t {
  kUnknownCommand,  // first field is not `A`, `R`, `K`, `S`, `H`, `W` or `U`
  kBadArity,        // wrong number of fields for the verb
  kBadOwner,        // owner not 1..64 bytes of 0x21..0x7E
  kBadKey,          // key not 1..250 bytes of 0x21..0x7E
  kBadLease,        // lease_ms not a decimal in 1..max lease
  kBadWait,         // wait_ms not a decimal in 0..max wait
  kBadToken,        // token not a decimal in 1..2^64-1
  kBadLimit,        // limit not a decimal in 0..65535 (v1.2)
  kLineTooLong,     // more than kMaxLineBytes including the terminator
  kBadCredential,   // `H` credential not 1..512 bytes of 0x21..0x7E: `E unauthenticated`, closed (§11)
};

// The wire spelling of an error code, e.g. "bad_arity".
std::string_view error_code(ParseError e);

}  // namespace lockd::proto
