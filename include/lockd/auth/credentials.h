// Credentials: the `--credentials` file (interfaces.md "Security files"):
// identities and salted SHA-256 hashes of random tokens (API keys). No
// plaintext secret is ever on disk; `H <credential>` and the admin API's
// `Authorization: Bearer <credential>` are checked against it.
//
//   [[credential]]
//   identity = "billing"
//   hash = "sha256$" + hex(salt) + "$" + hex(sha256(salt bytes ++ credential bytes))
//
// An identity may have several entries (rotation: add the new one, reload,
// move clients, remove the old one). Immutable once loaded; a reload
// builds a new one.
#pragma once

#include <array>
#include <toml++/toml.h>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace lockd::auth {

// Longest identity accepted in the security files (visible ASCII, no space:
// it is echoed as one field in `H <identity>`).
constexpr std::size_t kMaxIdentityBytes = 128;

// True for 1..kMaxIdentityBytes bytes of 0x21..0x7E.
bool valid_identity(std::string_view identity);

class Credentials {
 public:
  // Reads and checks the file. nullopt with `error` (one line, "FILE:LINE:
  // what" where the parser knows the line) when it does not parse or an
  // entry is malformed.
  static std::optional<Credentials> load(const std::string& path, std::string& error);
  // Same, from TOML text (`path` only names it in errors).
  static std::optional<Credentials> parse(std::string_view toml, const std::string& path,
                                          std::string& error);

  // The identity `credential` belongs to, or nullopt. Every entry is
  // hashed and compared in constant time, so the time taken says nothing
  // about which entry (or how much of a digest) matched.
  std::optional<std::string> identify(std::string_view credential) const;
  std::size_t size() const { return entries_.size(); }

 private:
  // Checks a parsed file (both load() and parse() end here).
  static std::optional<Credentials> from_table(const toml::table& table, const std::string& path,
                                         std::string& error);

  struct Entry {
    std::string identity;
    std::vector<unsigned char> salt;
    std::array<unsigned char, 32> digest;
  };
  std::vector<Entry> entries_;
};

// A `hash` value for `credential` with `salt`: "sha256$<hex salt>$<hex digest>".
std::string credential_hash(std::string_view credential, const std::vector<unsigned char>& salt);
// `n` random bytes from the OS's CSPRNG (OpenSSL RAND_bytes).
std::vector<unsigned char> random_bytes(std::size_t n);
// A new random credential: 32 random bytes as 64 hex characters.
std::string new_credential();

}  // namespace lockd::auth
