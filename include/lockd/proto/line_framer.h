// LineFramer: cuts a byte stream into protocol lines (§1), incrementally.
//
// Bytes arrive in arbitrary pieces (one at a time, or thousands of
// pipelined lines at once). The framer keeps an unfinished line between
// reads and enforces the 1024-byte limit without buffering past it.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "lockd/proto/parser.h"

namespace lockd::proto {

class LineFramer {
 public:
  enum class Status {
    kLine,      // `line` holds one line without its `\n`
    kNeedMore,  // no complete line in what was fed so far
    kTooLong,   // the current line exceeds kMaxLineBytes; the stream is dead
  };

  // Feeds bytes; they are consumed by subsequent next() calls. `data` must
  // stay valid until next() returns kNeedMore.
  void feed(std::string_view data) { input_ = data; }

  // Yields the next complete line. The view is valid until the next call.
  Status next(std::string_view& line);

  // Bytes held from an unfinished line.
  std::size_t pending_bytes() const { return partial_.size(); }

 private:
  std::string_view input_;
  std::string partial_;  // an unfinished line carried across feeds
  std::string joined_;   // the last line completed from a fragment
};

}  // namespace lockd::proto
