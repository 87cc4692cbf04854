// Test support: one sample out of a Prometheus text exposition (/metrics).
#pragma once

#include <string>

namespace lockd::testing {

// The value of one exposition sample, e.g. `lockd_keys` or
// `lockd_requests_total{verb="A",result="A"}` (written as lockd writes
// it); -1 when absent.
double metric(const std::string& text, const std::string& series);

}  // namespace lockd::testing
