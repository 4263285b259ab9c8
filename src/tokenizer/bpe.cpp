// BPE loading (vocab, merges in "a b" and [a, b] form) and word encoding.
#include "tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "tokenizer/json_util.h"
#include "tokenizer/unicode.h"

namespace akv::tok {
namespace {

void parse_vocab(const Json& j, const std::string& where, StringIdMap& vocab,
                 std::vector<std::string>& id_to_token, std::vector<bool>& has_id) {
  auto it = j.find("vocab");
  if (it == j.end() || !it->is_object()) throw_bad_field(where + ".vocab", "missing or not an object");
  vocab.reserve(it->size());
  for (auto entry = it->begin(); entry != it->end(); ++entry) {
    if (!entry.value().is_number_integer() || entry.value().get<int64_t>() < 0 ||
        entry.value().get<int64_t>() > (1 << 30))
      throw_bad_field(where + ".vocab[\"" + entry.key() + "\"]", "id is not a non-negative integer");
    auto id = static_cast<int32_t>(entry.value().get<int64_t>());
    vocab[entry.key()] = id;
    if (static_cast<size_t>(id) >= id_to_token.size()) {
      id_to_token.resize(id + 1);
      has_id.resize(id + 1, false);
    }
    id_to_token[id] = entry.key();
    has_id[id] = true;
  }
}

}  // namespace

std::unique_ptr<BpeModel> BpeModel::parse_or_throw(const Json& j, const std::string& where) {
  std::string type = json_string_or(j, "type", "BPE");
  if (type != "BPE") throw Error(ErrorKind::Unsupported, where + ".type: model type '" + type + "' is not supported");
  auto m = std::make_unique<BpeModel>();
  parse_vocab(j, where, m->vocab_, m->id_to_token_, m->has_id_);
  m->byte_fallback_ = json_bool_or(j, "byte_fallback", false);
  m->fuse_unk_ = json_bool_or(j, "fuse_unk", false);
  m->ignore_merges_ = json_bool_or(j, "ignore_merges", false);
  m->continuing_subword_prefix_ = json_string_or(j, "continuing_subword_prefix", "");
  m->end_of_word_suffix_ = json_string_or(j, "end_of_word_suffix", "");
  if (auto it = j.find("unk_token"); it != j.end() && it->is_string()) {
    auto id = m->find(it->get<std::string>());
    if (!id) throw_bad_field(where + ".unk_token", std::string("'").append(it->get<std::string>()).append("' is not in the vocab"));
    m->unk_id_ = *id;
  }

  auto merges = j.find("merges");
  if (merges == j.end() || !merges->is_array()) throw_bad_field(where + ".merges", "missing or not an array");
  m->merges_.reserve(merges->size() * 2);
  const size_t prefix_len = m->continuing_subword_prefix_.size();
  for (size_t rank = 0; rank < merges->size(); ++rank) {
    const Json& entry = (*merges)[rank];
    std::string a, b;
    if (entry.is_string()) {
      const std::string& s = entry.get_ref<const std::string&>();
      size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        throw_bad_field(where + ".merges[" + std::to_string(rank) + "]", "expected \"a b\", got \"" + s + "\"");
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (entry.is_array() && entry.size() == 2 && entry[0].is_string() && entry[1].is_string()) {
      a = entry[0].get<std::string>();
      b = entry[1].get<std::string>();
    } else {
      throw_bad_field(where + ".merges[" + std::to_string(rank) + "]", "expected \"a b\" or [a, b]");
    }
    auto id_a = m->find(a), id_b = m->find(b);
    std::string merged = a + (prefix_len && b.compare(0, prefix_len, m->continuing_subword_prefix_) == 0
                                  ? b.substr(prefix_len) : b);
    auto id_new = m->find(merged);
    if (!id_a || !id_b || !id_new)
      throw_bad_field(where + ".merges[" + std::to_string(rank) + "]",
                      "merge \"" + a + " " + b + "\" refers to a token missing from the vocab");
    m->merges_[pair_key(*id_a, *id_b)] = Merge{static_cast<int32_t>(rank), *id_new};
  }
  m->index_vocab();
  return m;
}

std::unique_ptr<BpeModel> BpeModel::build_or_throw(std::vector<std::string> tokens, std::span<const BpeMerge> merges,
                                                   const BpeOptions& options, const std::string& where) {
  auto m = std::make_unique<BpeModel>();
  const auto n_tokens = static_cast<int32_t>(tokens.size());
  m->vocab_.reserve(tokens.size());
  for (int32_t id = 0; id < n_tokens; ++id)
    if (!tokens[id].empty()) m->vocab_.emplace(tokens[id], id);
  m->id_to_token_ = std::move(tokens);
  m->has_id_.assign(m->id_to_token_.size(), true);
  if (options.unk_id >= n_tokens) throw_bad_field(where + ".unk_id", "id " + std::to_string(options.unk_id) + " is outside the vocab");
  m->unk_id_ = options.unk_id;
  m->byte_fallback_ = options.byte_fallback;
  m->fuse_unk_ = options.fuse_unk;
  m->ignore_merges_ = options.ignore_merges;
  m->merges_.reserve(merges.size() * 2);
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const BpeMerge& e = merges[rank];
    for (int32_t id : {e.left, e.right, e.merged})
      if (id < 0 || id >= n_tokens)
        throw_bad_field(where + ".merges[" + std::to_string(rank) + "]", "id " + std::to_string(id) + " is outside the vocab");
    m->merges_.emplace(pair_key(e.left, e.right), Merge{static_cast<int32_t>(rank), e.merged});
  }
  m->index_vocab();
  return m;
}

void BpeModel::index_vocab() {
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    byte_ids_[b] = find(name).value_or(-1);
  }
  // Each id covers the word bytes of its token text (less any subword prefix/suffix), a
  // byte-fallback id one byte, an unk id one character; fused unks cover any number.
  if (fuse_unk_ && unk_id_ >= 0 && !byte_fallback_) {
    max_bytes_per_id_ = 0;
  } else {
    max_bytes_per_id_ = 4;
    for (const std::string& t : id_to_token_) max_bytes_per_id_ = std::max(max_bytes_per_id_, t.size());
  }
}

std::optional<int32_t> BpeModel::find(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::token_of(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size() || !has_id_[id]) return nullptr;
  return &id_to_token_[id];
}

const BpeModel::Merge* BpeModel::find_merge(int32_t a, int32_t b) const {
  auto it = merges_.find(pair_key(a, b));
  return it == merges_.end() ? nullptr : &it->second;
}

// One symbol per character (with the subword prefix/suffix), byte_fallback or unk for
// characters missing from the vocab; consecutive unks fuse when fuse_unk is set.
void BpeModel::initial_symbols(std::string_view word, std::vector<int32_t>& ids) const {
  std::string scratch;
  bool last_unk = false;
  size_t pos = 0;
  while (pos < word.size()) {
    size_t start = pos;
    pos += static_cast<size_t>(utf8_char_len(static_cast<unsigned char>(word[pos])));
    pos = std::min(pos, word.size());
    std::string_view ch = word.substr(start, pos - start);
    std::optional<int32_t> id;
    if (continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
      id = find(ch);
    } else {
      scratch.clear();
      if (start > 0) scratch += continuing_subword_prefix_;
      scratch += ch;
      if (pos == word.size()) scratch += end_of_word_suffix_;
      id = find(scratch);
    }
    if (id) {
      ids.push_back(*id);
      last_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : ch) all = all && byte_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : ch) ids.push_back(byte_ids_[b]);
        last_unk = false;
        continue;
      }
    }
    if (unk_id_ < 0) continue;  // HF drops characters it cannot represent when there is no unk
    if (!(fuse_unk_ && last_unk)) ids.push_back(unk_id_);
    last_unk = true;
  }
}

void BpeModel::encode_word_uncached(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (auto id = find(word)) {
      out.push_back(*id);
      return;
    }
  }
  std::vector<int32_t> ids;
  initial_symbols(word, ids);
  const int n = static_cast<int>(ids.size());
  if (n <= 1) {
    out.insert(out.end(), ids.begin(), ids.end());
    return;
  }
  // Doubly linked list over `ids`; a removed symbol has id -1.
  std::vector<int> prev(n), next(n);
  for (int i = 0; i < n; ++i) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  struct Candidate {
    int32_t rank;
    int pos;
    int32_t new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  for (int i = 0; i + 1 < n; ++i)
    if (const Merge* m = find_merge(ids[i], ids[i + 1])) queue.push({m->rank, i, m->new_id});
  while (!queue.empty()) {
    Candidate top = queue.top();
    queue.pop();
    if (ids[top.pos] < 0 || next[top.pos] < 0) continue;
    int right = next[top.pos];
    const Merge* m = find_merge(ids[top.pos], ids[right]);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale entry
    ids[top.pos] = top.new_id;
    ids[right] = -1;
    next[top.pos] = next[right];
    if (next[right] >= 0) prev[next[right]] = top.pos;
    if (prev[top.pos] >= 0)
      if (const Merge* pm = find_merge(ids[prev[top.pos]], ids[top.pos]))
        queue.push({pm->rank, prev[top.pos], pm->new_id});
    if (next[top.pos] >= 0)
      if (const Merge* nm = find_merge(ids[top.pos], ids[next[top.pos]]))
        queue.push({nm->rank, top.pos, nm->new_id});
  }
  for (int i = 0; i >= 0; i = next[i]) out.push_back(ids[i]);
}

void BpeModel::encode_word_reference(std::string_view word, std::vector<int32_t>& out) const {
  if (ignore_merges_) {
    if (auto id = find(word)) {
      out.push_back(*id);
      return;
    }
  }
  std::vector<int32_t> ids;
  initial_symbols(word, ids);
  while (ids.size() > 1) {
    size_t best = 0;
    const Merge* best_merge = nullptr;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const Merge* m = find_merge(ids[i], ids[i + 1]);
      if (m != nullptr && (best_merge == nullptr || m->rank < best_merge->rank)) {
        best = i;
        best_merge = m;
      }
    }
    if (best_merge == nullptr) break;
    ids[best] = best_merge->new_id;
    ids.erase(ids.begin() + static_cast<std::ptrdiff_t>(best) + 1);
  }
  out.insert(out.end(), ids.begin(), ids.end());
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.size() > kMaxCachedWordBytes) {
    encode_word_uncached(word, out);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(cache_mu_);
    auto it = cache_.find(word);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  size_t first = out.size();
  encode_word_uncached(word, out);
  std::vector<int32_t> ids(out.begin() + static_cast<std::ptrdiff_t>(first), out.end());
  std::lock_guard<std::mutex> lock(cache_mu_);
  if (cache_.size() >= kMaxCacheEntries) cache_.clear();
  cache_.emplace(std::string(word), std::move(ids));
}

}  // namespace akv::tok
