#include "engine/kv_blocks.h"

#include <algorithm>
#include <string>

#include "common/error.h"

namespace rs {

KvBlockPool::KvBlockPool(int num_blocks, int block_size, bool enable_prefix_caching)
    : num_blocks_(num_blocks), block_size_(block_size), prefix_caching_(enable_prefix_caching) {
  if (num_blocks <= 0) throw Error("KV cache: num_kv_blocks must be positive (got " + std::to_string(num_blocks) + ")");
  if (block_size <= 0) throw Error("KV cache: block_size must be positive (got " + std::to_string(block_size) + ")");
  refcount_.assign(num_blocks, 0);
  lru_pos_.resize(num_blocks);
  in_lru_.assign(num_blocks, false);
  block_hash_.resize(num_blocks);
  free_.reserve(num_blocks);
  // Hand out low ids first (stack pops from the back).
  for (int b = num_blocks - 1; b >= 0; --b) free_.push_back(b);
}

std::optional<int32_t> KvBlockPool::allocate() {
  int32_t b;
  if (!free_.empty()) {
    b = free_.back();
    free_.pop_back();
  } else if (!lru_.empty()) {
    b = lru_.front();
    lru_.pop_front();
    in_lru_[b] = false;
    drop_from_cache(b);
  } else {
    return std::nullopt;
  }
  refcount_[b] = 1;
  return b;
}

void KvBlockPool::retain(int32_t b) {
  if (refcount_.at(b) == 0) {
    // Reviving a cached block: it leaves the eviction list.
    if (!in_lru_[b]) throw Error("KV cache: retain of free block " + std::to_string(b));
    lru_.erase(lru_pos_[b]);
    in_lru_[b] = false;
  }
  ++refcount_[b];
}

void KvBlockPool::release(int32_t b) {
  if (refcount_.at(b) <= 0) throw Error("KV cache: release of unreferenced block " + std::to_string(b));
  if (--refcount_[b] > 0) return;
  if (block_hash_[b]) {
    lru_pos_[b] = lru_.insert(lru_.end(), b);
    in_lru_[b] = true;
  } else {
    free_.push_back(b);
  }
}

void KvBlockPool::drop_from_cache(int32_t b) {
  if (!block_hash_[b]) return;
  auto it = cache_.find(*block_hash_[b]);
  if (it != cache_.end() && it->second.block == b) cache_.erase(it);
  block_hash_[b].reset();
}

uint64_t KvBlockPool::chain_hash(uint64_t parent, std::span<const int32_t> toks) {
  // FNV-1a style mixing with a splitmix finaliser: cheap, and good enough as a first filter
  // since lookups compare the stored tokens too.
  uint64_t h = parent ^ 0xcbf29ce484222325ull;
  for (int32_t t : toks) {
    h ^= static_cast<uint32_t>(t);
    h *= 0x100000001b3ull;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

std::vector<int32_t> KvBlockPool::match_prefix(std::span<const int32_t> tokens, int max_blocks,
                                               std::vector<uint64_t>* hashes) {
  std::vector<int32_t> out;
  if (!prefix_caching_) return out;
  uint64_t parent = kRootHash;
  const int full = static_cast<int>(tokens.size()) / block_size_;
  for (int i = 0; i < std::min(full, max_blocks); ++i) {
    auto blk = tokens.subspan(static_cast<size_t>(i) * block_size_, block_size_);
    uint64_t h = chain_hash(parent, blk);
    auto it = cache_.find(h);
    if (it == cache_.end() || it->second.parent_hash != parent ||
        !std::equal(blk.begin(), blk.end(), it->second.tokens.begin(), it->second.tokens.end()))
      break;
    retain(it->second.block);
    out.push_back(it->second.block);
    if (hashes) hashes->push_back(h);
    parent = h;
  }
  return out;
}

void KvBlockPool::register_full_block(int32_t b, uint64_t hash, uint64_t parent_hash,
                                      std::span<const int32_t> toks) {
  if (!prefix_caching_ || block_hash_[b]) return;
  if (cache_.count(hash)) return;
  cache_.emplace(hash, CacheEntry{b, parent_hash, std::vector<int32_t>(toks.begin(), toks.end())});
  block_hash_[b] = hash;
}

}  // namespace rs
