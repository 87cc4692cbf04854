// The client port with --client-tls: a real lockd, real certificates made
// by make-test-pki (openssl), real TCP.
#include <signal.h>

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include "eventually.h"
#include "http_get.h"
#include "lockd_process.h"
#include "tls_client.h"

namespace lockd::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::vector<std::string> tls_flags(const std::string& cert = pki("server.pem"),
                                   const std::string& key = pki("server.key")) {
  return {"--client-tls", "--tls-cert", cert, "--tls-key", key, "--tls-ca", pki("ca.pem")};
}

TEST(ClientTlsTest, RequestsOverTls13) {
  LockdProcess lockd(tls_flags());
  TlsLineClient c(lockd.port(), {});
  ASSERT_TRUE(c.handshake_ok()) << c.error();
  EXPECT_EQ(c.protocol(), "TLSv1.3");
  const std::string first = c.call("A alice orders/1 60000");
  const auto f = fields(first);
  ASSERT_EQ(f.size(), 4u) << first;
  EXPECT_EQ(f[0], "A");
  EXPECT_EQ(c.call("R " + f[1] + " orders/1"), "R " + f[1] + " orders/1");
  // A pipelined burst larger than one TLS record comes back whole.
  std::string burst;
  for (int i = 0; i < 2000; ++i) burst += "A o" + std::to_string(i) + " burst/" + std::to_string(i) + "\n";
  c.send(burst);
  for (int i = 0; i < 2000; ++i) {
    const auto line = c.read_line();
    ASSERT_TRUE(line.has_value()) << i;
    ASSERT_EQ(fields(*line).size(), 4u) << *line;
  }
}

TEST(ClientTlsTest, PlaintextClientIsDisconnectedAndNothingItSentIsProcessed) {
  LockdProcess lockd(tls_flags());
  LineClient plain(lockd.port());
  plain.send("A mallory victim 60000\n");
  EXPECT_TRUE(plain.wait_closed(20s));
  TlsLineClient c(lockd.port(), {});
  ASSERT_TRUE(c.handshake_ok()) << c.error();
  // mallory's acquire never ran: the key is free.
  EXPECT_EQ(fields(c.call("A alice victim 60000"))[0], "A");
}

// --tls-handshake-timeout-ms: a client that connects to the TLS port and
// never finishes its handshake (silent, or half a ClientHello) is closed at
// the deadline; a client that finished is never touched, and lockd serves on.
TEST(ClientTlsTest, UnfinishedHandshakeIsClosedAtTheDeadline) {
  auto flags = tls_flags();
  flags.insert(flags.end(), {"--tls-handshake-timeout-ms", "300", "--admin", "127.0.0.1:0"});
  LockdProcess lockd(flags);
  TlsLineClient early(lockd.port(), {});
  ASSERT_TRUE(early.handshake_ok()) << early.error();
  const auto start = std::chrono::steady_clock::now();
  LineClient silent(lockd.port());
  LineClient half(lockd.port());
  // A handshake record header announcing 512 bytes, then 4 of them.
  half.send(std::string("\x16\x03\x01\x02\x00\x01\x00\x01\xfc", 9));
  // More than one turn closes (a few a turn, so they never hold a reply up).
  std::vector<std::unique_ptr<LineClient>> crowd;
  for (int i = 0; i < 40; ++i) crowd.push_back(std::make_unique<LineClient>(lockd.port()));
  EXPECT_TRUE(silent.wait_closed(20s));
  EXPECT_TRUE(half.wait_closed(20s));
  for (auto& c : crowd) EXPECT_TRUE(c->wait_closed(20s));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 250ms);  // not before its deadline
  // The client that finished its handshake outlived the deadline.
  EXPECT_EQ(fields(early.call("A early k 60000"))[0], "A");
  TlsLineClient late(lockd.port(), {});
  ASSERT_TRUE(late.handshake_ok()) << late.error();
  EXPECT_EQ(fields(late.call("A late k2 60000"))[0], "A");
  EXPECT_NE(http(lockd.admin_port(), "/metrics").body.find("lockd_client_tls_handshake_timeouts_total 42\n"),
            std::string::npos);
}

TEST(ClientTlsTest, ClientCertificatesWithAuthCert) {
  LockdProcess lockd([] {
    auto f = tls_flags();
    f.insert(f.end(), {"--auth", "cert"});
    return f;
  }());
  // No certificate, another CA's, an expired one: refused, nothing processed.
  for (const auto& [cert, key] : std::vector<std::pair<std::string, std::string>>{
           {"", ""}, {pki("stranger.pem"), pki("stranger.key")}, {pki("expired.pem"), pki("expired.key")}}) {
    TlsLineClient c(lockd.port(), {pki("ca.pem"), cert, key});
    if (c.handshake_ok()) {  // TLS 1.3: the refusal comes as an alert after the client's Finished
      c.send("A mallory refused 60000\n");
      EXPECT_TRUE(c.wait_closed(20s)) << cert;
    }
  }
  TlsLineClient alice(lockd.port(), {pki("ca.pem"), pki("client-alice.pem"), pki("client-alice.key")});
  ASSERT_TRUE(alice.handshake_ok()) << alice.error();
  EXPECT_EQ(fields(alice.call("A alice refused 60000"))[0], "A");
}

TEST(ClientTlsTest, SighupRotatesTheCertificateAndKeepsConnections) {
  const fs::path dir = fs::path(test_pki_dir()) / "rotation";
  fs::create_directories(dir);
  const auto copy = [&](const std::string& from, const std::string& to) {
    fs::copy_file(pki(from), dir / to, fs::copy_options::overwrite_existing);
  };
  copy("server.pem", "cert.pem");
  copy("server.key", "key.pem");
  LockdProcess lockd(tls_flags((dir / "cert.pem").string(), (dir / "key.pem").string()));
  TlsLineClient before(lockd.port(), {});
  ASSERT_TRUE(before.handshake_ok()) << before.error();
  const std::string old_serial = before.server_serial();
  const auto held = fields(before.call("A alice rotating 60000"));
  ASSERT_EQ(held.size(), 4u);

  // A broken file: the old certificate stays in force, and it is logged.
  { std::ofstream(dir / "cert.pem") << "not a certificate\n"; }
  lockd.process().signal(SIGHUP);
  ASSERT_TRUE(lockd.process().wait_for_line("keeping the old TLS files", 20s));
  {
    TlsLineClient c(lockd.port(), {});
    ASSERT_TRUE(c.handshake_ok()) << c.error();
    EXPECT_EQ(c.server_serial(), old_serial);
  }

  copy("server2.pem", "cert.pem");
  copy("server2.key", "key.pem");
  lockd.process().signal(SIGHUP);
  ASSERT_TRUE(lockd.process().wait_for_line("reloading TLS", 20s));
  EXPECT_TRUE(eventually([&] {
    TlsLineClient c(lockd.port(), {});
    return c.handshake_ok() && c.server_serial() != old_serial;
  }));
  // The connection made before both reloads still works.
  EXPECT_EQ(before.call("R " + held[1] + " rotating"), "R " + held[1] + " rotating");
}

TEST(ClientTlsTest, UnreadableFilesAtStartAreOneLineAndExit2) {
  ChildProcess p;
  ASSERT_TRUE(p.start({lockd_binary(), "--listen", "127.0.0.1:0", "--admin", "off", "--client-tls",
                       "--tls-cert", "/nonexistent/cert.pem", "--tls-key", pki("server.key")}));
  EXPECT_EQ(p.wait_exit(20s), 2);
  EXPECT_NE(p.stderr_text().find("/nonexistent/cert.pem"), std::string::npos) << p.stderr_text();
  ChildProcess q;
  ASSERT_TRUE(q.start({lockd_binary(), "--listen", "127.0.0.1:0", "--admin", "off", "--client-tls"}));
  EXPECT_EQ(q.wait_exit(20s), 2);
  EXPECT_NE(q.stderr_text().find("--tls-cert"), std::string::npos) << q.stderr_text();
}

}  // namespace
}  // namespace lockd::testing
