// lockd: composition root. Parses the config, sets up logging, builds the
// Daemon and runs it (STYLE §4).
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "lockd/daemon/config.h"
#include "lockd/daemon/daemon.h"

namespace {

void setup_logging(const lockd::daemon::Config& config) {
  auto logger = spdlog::stderr_logger_st("lockd");
  // In cluster mode every line names its node, so the logs of three nodes
  // in one terminal (or one journal) can be told apart.
  const bool cluster = config.mode == lockd::daemon::Mode::kCluster && config.node_id;
  const std::string node = cluster ? std::to_string(*config.node_id) : std::string();
  if (config.log_format == lockd::daemon::LogFormat::kJson) {
    // Messages are ours and contain no quotes or backslashes.
    logger->set_pattern(cluster ? R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","node":)" + node +
                                      R"(,"msg":"%v"})"
                                : R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","msg":"%v"})",
                        spdlog::pattern_time_type::utc);
  } else {
    logger->set_pattern(cluster ? "%Y-%m-%dT%H:%M:%S.%e %^%l%$ [node " + node + "] %v"
                                : "%Y-%m-%dT%H:%M:%S.%e %^%l%$ %v");
  }
  logger->set_level(spdlog::level::from_str(config.log_level));
  logger->flush_on(spdlog::level::trace);  // a test reads the `listening` line
  spdlog::set_default_logger(logger);
}

}  // namespace

int main(int argc, char** argv) {
  lockd::daemon::ParseOutcome parsed = lockd::daemon::parse_config(argc, argv);
  if (!parsed.config) {
    std::fputs(parsed.message.c_str(), parsed.exit_code == 0 ? stdout : stderr);
    if (parsed.exit_code != 0) std::fputc('\n', stderr);
    return parsed.exit_code;
  }
  setup_logging(*parsed.config);
  for (const std::string& warning : parsed.warnings) spdlog::warn("{}", warning);
  lockd::daemon::Daemon daemon(std::move(*parsed.config));
  std::string error;
  if (!daemon.start(error)) {
    std::fprintf(stderr, "lockd: %s\n", error.c_str());
    return 2;
  }
  return daemon.run();
}
