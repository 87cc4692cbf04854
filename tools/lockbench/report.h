// Turning Results into what a person (text) or a script (--json) reads.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "config.h"
#include "runner.h"

namespace lockbench {

// Jain's fairness index of per-client counts: 1.0 when every client got
// the same, 1/n when one client got everything. 0 for no data.
double jain_index(const std::vector<std::uint64_t>& counts);

nlohmann::json report_json(const Config& cfg, const Results& res);
std::string report_text(const Config& cfg, const Results& res);

}  // namespace lockbench
