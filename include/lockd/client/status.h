// Errors are values in the client API: every call returns a Status (or a
// Result<T> that carries one), never throws. A lock client's failures are
// ordinary outcomes the caller must decide about (held by someone else,
// lost, outcome unknown), so they belong in the return type where the
// compiler makes the caller look at them.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "lockd/common/check.h"

namespace lockd::client {

// What happened to a request. Only kOk means the server did what was asked.
enum class Code {
  kOk,               // `A`, `S`, `R` or `K`: done
  kTimedOut,         // `T`: held by someone else (wait 0), or the wait ran out
  kBusy,             // `B`: the key's queue or a server-wide cap is full; not enqueued
  kNotHeld,          // `N`: the token does not hold the key (released or extended: no)
  kIndeterminate,    // may or may not have taken effect: `E indeterminate`, the
                     // connection dropped after the request was sent, or no reply
                     // came within the client's deadline
  kNoLeader,         // cluster: `E no_leader` (or redirects) until the retry budget ran out
  kUnreachable,      // no address could be connected to; the request was not sent
  kRejected,         // the server refused the request as invalid (`E bad_lease` ...)
  kInvalidArgument,  // refused before sending: a field the protocol does not allow
  kProtocol,         // the server sent a line this client does not understand
  kInFlight,         // an acquire with this owner and key is already in flight on
                     // the connection: its replies could not be told apart
  kLimitMismatch,    // `E limit_mismatch`: a shared acquire's limit differs from the
                     // one the key's shared holders and waiters carry (v1.2, §5b)
  kUnauthenticated,  // `E unauthenticated` (v1.2, §11): no identity on the connection,
                     // or Options::credential refused (not tried on other nodes)
  kForbidden,        // `E forbidden`: the ACL does not grant the verb on the key
};

// The name of a code, for messages ("timed_out", "not_held" ...).
const char* code_name(Code code);

// A code and, unless kOk, a one-line human explanation.
struct Status {
  Code code = Code::kOk;
  std::string message;

  bool ok() const { return code == Code::kOk; }
  static Status Ok() { return {}; }
  // "timed_out: <message>", or "ok".
  std::string to_string() const;
};

// A value or the Status saying why there is none.
template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT: implicit on purpose
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    LOCKD_CHECK(!status_.ok());
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  Code code() const { return status_.code; }
  // The value; calling these on a failed Result is a bug in the caller.
  T& value() {
    LOCKD_CHECK(value_.has_value());
    return *value_;
  }
  const T& value() const {
    LOCKD_CHECK(value_.has_value());
    return *value_;
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::optional<T> value_;
  Status status_;  // kOk when value_ is set
};

}  // namespace lockd::client
