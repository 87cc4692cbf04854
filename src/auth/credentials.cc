#include "lockd/auth/credentials.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include "lockd/common/check.h"
#include "lockd/common/toml_file.h"

namespace lockd::auth {

namespace {

constexpr std::string_view kScheme = "sha256$";
constexpr std::size_t kMaxSaltBytes = 256;

std::array<unsigned char, 32> sha256(const std::vector<unsigned char>& salt,
                                     std::string_view credential) {
  std::array<unsigned char, 32> out{};
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  LOCKD_CHECK(ctx != nullptr);
  unsigned int len = 0;
  LOCKD_CHECK(EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) == 1);
  LOCKD_CHECK(EVP_DigestUpdate(ctx, salt.data(), salt.size()) == 1);
  LOCKD_CHECK(EVP_DigestUpdate(ctx, credential.data(), credential.size()) == 1);
  LOCKD_CHECK(EVP_DigestFinal_ex(ctx, out.data(), &len) == 1 && len == out.size());
  EVP_MD_CTX_free(ctx);
  return out;
}

std::string to_hex(const unsigned char* p, std::size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * n);
  for (std::size_t i = 0; i < n; ++i) {
    s.push_back(kDigits[p[i] >> 4]);
    s.push_back(kDigits[p[i] & 15]);
  }
  return s;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool from_hex(std::string_view s, std::vector<unsigned char>& out) {
  if (s.size() % 2 != 0) return false;
  out.clear();
  for (std::size_t i = 0; i < s.size(); i += 2) {
    const int hi = hex_value(s[i]);
    const int lo = hex_value(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<unsigned char>(hi * 16 + lo));
  }
  return true;
}

}  // namespace

bool valid_identity(std::string_view identity) {
  if (identity.empty() || identity.size() > kMaxIdentityBytes) return false;
  for (unsigned char c : identity) {
    if (c < 0x21 || c > 0x7E) return false;
  }
  return true;
}

std::optional<Credentials> Credentials::load(const std::string& path, std::string& error) {
  auto table = read_toml_file(path, error);
  if (!table) return std::nullopt;
  return from_table(*table, path, error);
}

std::optional<Credentials> Credentials::parse(std::string_view toml_text, const std::string& path,
                                              std::string& error) {
  auto table = parse_toml_text(toml_text, path, error);
  if (!table) return std::nullopt;
  return from_table(*table, path, error);
}

std::optional<Credentials> Credentials::from_table(const toml::table& table, const std::string& path,
                                      std::string& error) {
  Credentials c;
  for (const auto& [key, node] : table) {
    if (key.str() != "credential") {
      error = toml_where(path, node.source()) + "unknown key '" + std::string(key.str()) +
              "' (expected [[credential]] tables)";
      return std::nullopt;
    }
  }
  const toml::node* list = table.get("credential");
  if (list == nullptr) return c;  // no credentials: nobody can authenticate by token
  const toml::array* arr = list->as_array();
  if (arr == nullptr) {
    error = toml_where(path, list->source()) + "'credential' must be an array of tables ([[credential]])";
    return std::nullopt;
  }
  for (const toml::node& n : *arr) {
    const toml::table* t = n.as_table();
    if (t == nullptr) {
      error = toml_where(path, n.source()) + "each credential must be a table ([[credential]])";
      return std::nullopt;
    }
    for (const auto& [key, v] : *t) {
      if (key.str() != "identity" && key.str() != "hash") {
        error = toml_where(path, v.source()) + "unknown key '" + std::string(key.str()) +
                "' in [[credential]] (expected identity, hash)";
        return std::nullopt;
      }
    }
    const auto identity = (*t)["identity"].value<std::string>();
    const auto hash = (*t)["hash"].value<std::string>();
    if (!identity || !valid_identity(*identity)) {
      error = toml_where(path, n.source()) +
              "[[credential]] needs identity = \"...\" (1..128 visible ASCII characters, no spaces)";
      return std::nullopt;
    }
    Entry e;
    e.identity = *identity;
    std::string_view h = hash ? std::string_view(*hash) : std::string_view();
    const auto dollar = h.size() > kScheme.size() ? h.find('$', kScheme.size()) : std::string::npos;
    std::vector<unsigned char> digest;
    if (!hash || h.substr(0, kScheme.size()) != kScheme || dollar == std::string::npos ||
        !from_hex(h.substr(kScheme.size(), dollar - kScheme.size()), e.salt) || e.salt.empty() ||
        e.salt.size() > kMaxSaltBytes || !from_hex(h.substr(dollar + 1), digest) ||
        digest.size() != e.digest.size()) {
      error = toml_where(path, n.source()) + "credential of '" + e.identity +
              "': hash must be \"sha256$<hex salt>$<64 hex digits>\"";
      return std::nullopt;
    }
    std::copy(digest.begin(), digest.end(), e.digest.begin());
    c.entries_.push_back(std::move(e));
  }
  return c;
}

std::optional<std::string> Credentials::identify(std::string_view credential) const {
  // Every entry is tried (no early exit), each digest compared in constant
  // time: a wrong credential costs the same whichever entry it resembles.
  const std::string* found = nullptr;
  for (const Entry& e : entries_) {
    const auto d = sha256(e.salt, credential);
    const bool match = CRYPTO_memcmp(d.data(), e.digest.data(), d.size()) == 0;
    if (match && found == nullptr) found = &e.identity;
  }
  if (found == nullptr) return std::nullopt;
  return *found;
}

std::string credential_hash(std::string_view credential, const std::vector<unsigned char>& salt) {
  const auto d = sha256(salt, credential);
  return std::string(kScheme) + to_hex(salt.data(), salt.size()) + "$" + to_hex(d.data(), d.size());
}

std::vector<unsigned char> random_bytes(std::size_t n) {
  std::vector<unsigned char> b(n);
  LOCKD_CHECK(RAND_bytes(b.data(), static_cast<int>(n)) == 1);
  return b;
}

std::string new_credential() {
  const auto b = random_bytes(32);
  return to_hex(b.data(), b.size());
}

}  // namespace lockd::auth
