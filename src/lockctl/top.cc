// `lockctl top`: a live view of a lockd, redrawn every interval from
// `GET /v1/top`, the way top(1) shows processes: node figures, request
// rates per verb (from counter deltas between frames), then the busiest
// keys (share of the latest requests), the longest queues and the oldest
// holders.
//
// Why raw termios + ANSI and no curses: the view is a few lines of text
// redrawn in place; the escape codes needed (alternate screen, home, clear
// to end of line/screen, hide cursor) are universal, and skipping curses
// keeps lockctl dependency-free. The terminal is restored on every exit
// path: `q`, Ctrl-C (SIGINT), SIGTERM/SIGHUP, or an error.
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <optional>

#include "client.h"
#include "commands.h"
#include "format.h"

namespace lockd::lockctl {

using json = nlohmann::ordered_json;

namespace {

constexpr std::size_t kMaxRows = 20;   // per table when fitting the terminal
constexpr std::size_t kHeaderLines = 4;
constexpr std::size_t kLinesPerTable = 3;  // blank, title, column header

volatile std::sig_atomic_t g_stop = 0;

void on_stop_signal(int) { g_stop = 1; }

// Puts the terminal in a non-canonical, no-echo mode on the alternate
// screen for the life of the view, and restores all of it when destroyed.
class TerminalSession {
 public:
  TerminalSession() : in_tty_(isatty(STDIN_FILENO) != 0), out_tty_(isatty(STDOUT_FILENO) != 0) {
    if (in_tty_ && tcgetattr(STDIN_FILENO, &saved_) == 0) {
      termios raw = saved_;
      // Keys arrive one by one without echo; ISIG stays on so Ctrl-C still
      // raises SIGINT, which we catch to restore the terminal.
      raw.c_lflag &= ~static_cast<tcflag_t>(ICANON | ECHO);
      raw.c_cc[VMIN] = 0;
      raw.c_cc[VTIME] = 0;
      restore_ = tcsetattr(STDIN_FILENO, TCSAFLUSH, &raw) == 0;
    }
    struct sigaction sa {};
    sa.sa_handler = &on_stop_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: poll() returns EINTR at once
    for (int i = 0; i < kSignals; ++i) sigaction(kSignalList[i], &sa, &old_[i]);
    if (out_tty_) write_out("\x1b[?1049h\x1b[?25l");  // alternate screen, hide cursor
  }
  ~TerminalSession() {
    if (out_tty_) write_out("\x1b[?25h\x1b[?1049l");
    if (restore_) tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_);
    for (int i = 0; i < kSignals; ++i) sigaction(kSignalList[i], &old_[i], nullptr);
  }
  TerminalSession(const TerminalSession&) = delete;
  TerminalSession& operator=(const TerminalSession&) = delete;

  bool in_tty() const { return in_tty_; }
  bool out_tty() const { return out_tty_; }
  // Terminal size, or 24x80 when not a terminal.
  void size(std::size_t& rows, std::size_t& cols) const {
    winsize ws{};
    if (out_tty_ && ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row > 0 && ws.ws_col > 0) {
      rows = ws.ws_row;
      cols = ws.ws_col;
    } else {
      rows = 24;
      cols = 80;
    }
  }
  static void write_out(std::string_view s) {
    while (!s.empty()) {
      const ssize_t n = ::write(STDOUT_FILENO, s.data(), s.size());
      if (n <= 0) return;
      s.remove_prefix(static_cast<std::size_t>(n));
    }
  }

 private:
  static constexpr int kSignals = 3;
  static constexpr int kSignalList[kSignals] = {SIGINT, SIGTERM, SIGHUP};
  bool in_tty_;
  bool out_tty_;
  bool restore_ = false;
  termios saved_{};
  struct sigaction old_[kSignals] {};
};

// Counters from one frame, for rates.
struct Sample {
  std::chrono::steady_clock::time_point at;
  json requests;
  json replies;
};

std::string rates(const char* title, const json& now, const json* before, double secs,
                  std::initializer_list<const char*> names) {
  std::string s = title;
  for (const char* n : names) {
    if (before == nullptr || secs <= 0 || !now.contains(n) || !before->contains(n)) {
      s += fmt::format("  {} -", n);
      continue;
    }
    const double d = static_cast<double>(now[n].get<std::uint64_t>()) -
                     static_cast<double>((*before)[n].get<std::uint64_t>());
    s += fmt::format("  {} {:.1f}", n, d / secs);
  }
  return s;
}

std::string ms_cell(const json& r, const char* name, bool expiry) {
  if (!r.contains(name) || !r[name].is_number()) return "-";
  const auto ms = r[name].get<std::int64_t>();
  return expiry ? human_expiry_ms(ms) : human_duration_ms(ms);
}

std::string render(const Globals& g, const json& top, const Sample* before, const Sample& now,
                   std::size_t rows) {
  const json& st = top["status"];
  std::string out;
  const std::time_t wall = std::time(nullptr);
  char clock[16];
  std::strftime(clock, sizeof clock, "%H:%M:%S", std::localtime(&wall));
  out += fmt::format("lockd {}  {}  admin {}  up {}  {}   (q to quit)\n", cell(st["version"]),
                     cell(st["role"]), g.admin.to_string(),
                     ms_cell(st, "uptime_ms", false), clock);
  out += fmt::format("keys {}  holders {}  waiters {}  connections {}\n", cell(st["keys"]),
                     cell(st["holders"]), cell(st["waiters"]), cell(st["connections"]));
  const double secs =
      before != nullptr ? std::chrono::duration<double>(now.at - before->at).count() : 0;
  out += rates("requests/s", now.requests, before ? &before->requests : nullptr, secs,
               {"A", "R", "invalid"}) +
         "   " +
         rates("replies/s", now.replies, before ? &before->replies : nullptr, secs,
               {"A", "T", "B", "R", "N", "E"}) +
         "\n";

  const auto section = [&](const std::string& title, const json& list, bool busiest,
                           const char* empty) {
    out += "\n" + title + "\n";
    if (list.empty()) {
      out += fmt::format("  ({})\n", empty);
      return;
    }
    Table t(busiest ? std::vector<std::string>{"KEY", "REQS", "SHARE", "OWNER", "WAITERS",
                                               "EXPIRES"}
                    : std::vector<std::string>{"KEY", "WAITERS", "OWNER", "HELD", "EXPIRES"});
    const double sampled = std::max(1.0, top.value("sampled_requests", 1.0));
    std::size_t n = 0;
    for (const json& r : list) {
      if (n++ >= rows) break;
      if (busiest) {
        const double reqs = r.value("requests", 0.0);
        t.add({cell(r["key"]), cell(r["requests"]), fmt::format("{:.1f}%", 100.0 * reqs / sampled),
               cell(r["owner"]), cell(r["waiters"]), ms_cell(r, "expires_in_ms", true)});
      } else {
        t.add({cell(r["key"]), cell(r["waiters"]), cell(r["owner"]),
               ms_cell(r, "held_ms", false), ms_cell(r, "expires_in_ms", true)});
      }
    }
    out += t.render("  ");
  };
  section(fmt::format("BUSIEST KEYS (last {} requests)", cell(top["sampled_requests"])),
          top["busiest"], true, "no requests yet");
  section("LONGEST QUEUES", top["longest_queues"], false, "no waiters");
  section("OLDEST HOLDERS", top["oldest_holders"], false, "no live holders");
  return out;
}

// Fits `frame` to the screen: each line cut to `cols`, each followed by
// clear-to-end-of-line, the rest of the screen cleared.
std::string fit(const std::string& frame, std::size_t rows, std::size_t cols) {
  std::string out = "\x1b[H";
  std::size_t line_no = 0, start = 0;
  while (start < frame.size() && line_no < rows) {
    std::size_t end = frame.find('\n', start);
    if (end == std::string::npos) end = frame.size();
    out.append(frame, start, std::min(end - start, cols));
    out += "\x1b[K";
    if (++line_no < rows) out += "\r\n";
    start = end + 1;
  }
  out += "\x1b[J";
  return out;
}

}  // namespace

int cmd_top(const Globals& g, const TopOptions& opt) {
  g_stop = 0;
  std::optional<Sample> before;
  std::string last_error;
  {
    TerminalSession term;
    for (std::uint64_t frame = 0; g_stop == 0; ++frame) {
      std::size_t rows = 24, cols = 80;
      term.size(rows, cols);
      std::size_t per_table = opt.rows;
      if (per_table == 0) {
        const std::size_t fixed = kHeaderLines + 3 * kLinesPerTable;
        per_table = rows > fixed + 3 ? std::min(kMaxRows, (rows - fixed) / 3) : 1;
      }
      const auto started = std::chrono::steady_clock::now();
      std::string error;
      Failure failure = Failure::kUnreachable;
      net::Endpoint answered;
      const auto resp =
          admin_get(g, fmt::format("/v1/top?limit={}", per_table), answered, error, failure);
      std::string frame_text;
      json top;
      if (resp && resp->status == 200) {
        top = json::parse(resp->body, nullptr, false);
        if (top.is_discarded() || !top.contains("status")) {
          error = fmt::format("the admin API at {} answered something that is not /v1/top JSON",
                              answered.to_string());
        }
      } else if (resp) {
        error = fmt::format("HTTP {} from /v1/top at {}", resp->status, answered.to_string());
      }
      if (!error.empty()) {
        if (!before) {  // never reached it: fail like every other command
          last_error = error;
          break;
        }
        frame_text = fmt::format("lockctl top: {} (retrying)\n", error);
      } else {
        Sample now{started, top["status"].value("requests", json::object()),
                   top["status"].value("replies", json::object())};
        frame_text = render(g, top, before ? &*before : nullptr, now, per_table);
        before = std::move(now);
      }
      if (term.out_tty()) {
        TerminalSession::write_out(fit(frame_text, rows, cols));
      } else {
        TerminalSession::write_out(frame_text + "\n");
      }
      if (opt.iterations != 0 && frame + 1 >= opt.iterations) break;

      // Sleep until the next frame, reading keys meanwhile.
      const auto next = started + std::chrono::milliseconds(opt.interval_ms);
      while (g_stop == 0) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                              next - std::chrono::steady_clock::now())
                              .count();
        if (left <= 0) break;
        pollfd p{STDIN_FILENO, POLLIN, 0};
        const int r = ::poll(&p, term.in_tty() ? 1 : 0, static_cast<int>(left));
        if (r > 0) {
          char keys[64];
          const ssize_t n = ::read(STDIN_FILENO, keys, sizeof keys);
          if (n == 0 && !term.in_tty()) break;
          for (ssize_t i = 0; i < n; ++i) {
            if (keys[i] == 'q' || keys[i] == 'Q' || keys[i] == 0x03) g_stop = 1;
          }
        }
      }
    }
  }  // terminal restored here
  if (!last_error.empty()) {
    std::fprintf(stderr, "lockctl: %s\n", last_error.c_str());
    return kExitUnreachable;
  }
  return kExitOk;
}

}  // namespace lockd::lockctl
