#include "fake_server.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <map>

namespace lockd::testing {

FakeServer::FakeServer(Handler handler) : handler_(std::move(handler)) {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = 0;
  ::inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
  ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa);
  ::listen(listen_fd_, 16);
  socklen_t len = sizeof sa;
  ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
  port_ = ntohs(sa.sin_port);
  if (::pipe2(wake_, O_CLOEXEC) != 0) wake_[0] = wake_[1] = -1;
  thread_ = std::thread([this] { run(); });
}

FakeServer::~FakeServer() {
  stop_ = true;
  const char c = 's';
  (void)!::write(wake_[1], &c, 1);
  thread_.join();
  ::close(listen_fd_);
  ::close(wake_[0]);
  ::close(wake_[1]);
}

std::vector<std::string> FakeServer::received() const {
  const std::lock_guard lk(mu_);
  return received_;
}

void FakeServer::push(const std::string& line) {
  {
    const std::lock_guard lk(mu_);
    pushes_.push_back(line);
  }
  const char c = 'p';
  (void)!::write(wake_[1], &c, 1);
}

void FakeServer::run() {
  std::map<int, std::string> conns;  // fd -> unfinished input
  const auto send_line = [](int fd, const std::string& line) {
    const std::string out = line + "\n";
    (void)!::send(fd, out.data(), out.size(), MSG_NOSIGNAL);
  };
  while (!stop_) {
    std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    for (const auto& [fd, _] : conns) fds.push_back({fd, POLLIN, 0});
    if (::poll(fds.data(), fds.size(), 1000) <= 0) continue;
    if (fds[0].revents & POLLIN) {
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd >= 0) conns[fd] = "";
    }
    if (fds[1].revents & POLLIN) {
      char buf[64];
      (void)!::read(wake_[0], buf, sizeof buf);
      std::vector<std::string> pushes;
      {
        const std::lock_guard lk(mu_);
        pushes.swap(pushes_);
      }
      for (const auto& line : pushes) {
        for (const auto& [fd, _] : conns) send_line(fd, line);
      }
    }
    for (std::size_t i = 2; i < fds.size(); ++i) {
      if (!(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const int fd = fds[i].fd;
      char buf[4096];
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n <= 0) {
        ::close(fd);
        conns.erase(fd);
        continue;
      }
      std::string& in = conns[fd];
      in.append(buf, static_cast<std::size_t>(n));
      for (std::size_t nl; (nl = in.find('\n')) != std::string::npos;) {
        const std::string line = in.substr(0, nl);
        in.erase(0, nl + 1);
        {
          const std::lock_guard lk(mu_);
          received_.push_back(line);
        }
        for (const auto& reply : handler_(line)) send_line(fd, reply);
      }
    }
  }
  for (const auto& [fd, _] : conns) ::close(fd);
}

}  // namespace lockd::testing
