#pragma once
// Paged KV cache bookkeeping: which block ids are free, who references them, and which full
// blocks hold a known prefix (the prefix cache). The bytes live in the backend; this class
// only hands out ids.
//
// A block is in exactly one of three places:
//   referenced  refcount > 0 (a live sequence's block table holds it)
//   cached      refcount == 0 but its content hash is registered: reusable by a later request
//               with the same prefix, evicted least-recently-freed first when ids run out
//   free        refcount == 0, no content
//
// Prefix hashes chain: hash(block i) = H(hash(block i-1), tokens of block i), so equal hashes
// mean equal prefixes, not just equal blocks. Each cached entry also keeps its parent hash and
// tokens, compared on lookup, so a 64-bit hash collision cannot serve the wrong KV.
#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace rs {

class KvBlockPool {
 public:
  KvBlockPool(int num_blocks, int block_size, bool enable_prefix_caching);

  int num_blocks() const { return num_blocks_; }
  int block_size() const { return block_size_; }
  bool prefix_caching() const { return prefix_caching_; }

  // Ids that allocate() can hand out now (free + evictable cached).
  int num_available() const { return static_cast<int>(free_.size() + lru_.size()); }
  int num_referenced() const { return num_blocks_ - num_available(); }
  int num_cached_unreferenced() const { return static_cast<int>(lru_.size()); }

  // One block with refcount 1, or nullopt when every block is referenced. May evict the
  // least recently released cached block.
  std::optional<int32_t> allocate();
  void retain(int32_t block);   // refcount + 1 (sharing between choices, cache hits)
  void release(int32_t block);  // refcount - 1; at 0 the block becomes cached or free
  int refcount(int32_t block) const { return refcount_.at(block); }

  static uint64_t chain_hash(uint64_t parent, std::span<const int32_t> block_tokens);
  static constexpr uint64_t kRootHash = 0x9E3779B97F4A7C15ull;

  // Longest run of cached full blocks matching the start of `tokens`, at most `max_blocks`.
  // Each returned block is retained; `hashes` receives their chain hashes.
  std::vector<int32_t> match_prefix(std::span<const int32_t> tokens, int max_blocks,
                                    std::vector<uint64_t>* hashes);
  // Registers a full, computed block under its chain hash. No effect when caching is off or the
  // hash is already served by another block (that block keeps serving it).
  void register_full_block(int32_t block, uint64_t hash, uint64_t parent_hash,
                           std::span<const int32_t> block_tokens);

  // Counters in tokens, as vLLM reports them.
  uint64_t query_tokens() const { return query_tokens_; }
  uint64_t hit_tokens() const { return hit_tokens_; }
  void count_query(uint64_t tokens, uint64_t hits) {
    query_tokens_ += tokens;
    hit_tokens_ += hits;
  }

 private:
  struct CacheEntry {
    int32_t block;
    uint64_t parent_hash;
    std::vector<int32_t> tokens;
  };
  void drop_from_cache(int32_t block);

  int num_blocks_, block_size_;
  bool prefix_caching_;
  std::vector<int> refcount_;
  std::vector<int32_t> free_;                       // stack of content-free ids
  std::list<int32_t> lru_;                          // cached, unreferenced; front = evict first
  std::vector<std::list<int32_t>::iterator> lru_pos_;
  std::vector<bool> in_lru_;
  std::vector<std::optional<uint64_t>> block_hash_;  // hash a block is registered under
  std::unordered_map<uint64_t, CacheEntry> cache_;
  uint64_t query_tokens_ = 0, hit_tokens_ = 0;
};

}  // namespace rs
