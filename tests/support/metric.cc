#include "metric.h"

#include <sstream>

namespace lockd::testing {

double metric(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(series + " ")) return std::stod(line.substr(series.size() + 1));
  }
  return -1;
}

}  // namespace lockd::testing
