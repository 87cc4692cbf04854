#include "lockd/client/status.h"

namespace lockd::client {

const char* code_name(Code code) {
  switch (code) {
    case Code::kOk: return "ok";
    case Code::kTimedOut: return "timed_out";
    case Code::kBusy: return "busy";
    case Code::kNotHeld: return "not_held";
    case Code::kIndeterminate: return "indeterminate";
    case Code::kNoLeader: return "no_leader";
    case Code::kUnreachable: return "unreachable";
    case Code::kRejected: return "rejected";
    case Code::kInvalidArgument: return "invalid_argument";
    case Code::kProtocol: return "protocol";
    case Code::kInFlight: return "in_flight";
    case Code::kLimitMismatch: return "limit_mismatch";
    case Code::kUnauthenticated: return "unauthenticated";
    case Code::kForbidden: return "forbidden";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  std::string s = code_name(code);
  if (!message.empty()) {
    s += ": ";
    s += message;
  }
  return s;
}

}  // namespace lockd::client
