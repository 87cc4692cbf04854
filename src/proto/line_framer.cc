#include "lockd/proto/line_framer.h"

namespace lockd::proto {

LineFramer::Status LineFramer::next(std::string_view& line) {
  const std::size_t nl = input_.find('\n');
  if (partial_.empty() && nl != std::string_view::npos) {
    // Fast path: the whole line is in this read; no copy.
    if (nl + 1 > kMaxLineBytes) return Status::kTooLong;
    line = input_.substr(0, nl);
    input_.remove_prefix(nl + 1);
    return Status::kLine;
  }
  if (nl == std::string_view::npos) {
    // Keep the fragment; a line that cannot end within the limit is dead now.
    if (partial_.size() + input_.size() >= kMaxLineBytes) return Status::kTooLong;
    partial_.append(input_);
    input_ = {};
    return Status::kNeedMore;
  }
  if (partial_.size() + nl + 1 > kMaxLineBytes) return Status::kTooLong;
  partial_.append(input_.substr(0, nl));
  input_.remove_prefix(nl + 1);
  // Hand out the joined line; partial_ is cleared on the next call.
  joined_.swap(partial_);
  partial_.clear();
  line = joined_;
  return Status::kLine;
}

}  // namespace lockd::proto
