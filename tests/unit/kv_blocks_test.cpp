#include <doctest/doctest.h>

#include <vector>

#include "common/error.h"
#include "engine/kv_blocks.h"

using rs::KvBlockPool;

namespace {
// Registers `tokens` (a whole number of blocks) as computed blocks; returns their ids.
std::vector<int32_t> fill_and_register(KvBlockPool& pool, const std::vector<int32_t>& tokens) {
  std::vector<int32_t> ids;
  uint64_t parent = KvBlockPool::kRootHash;
  const int bs = pool.block_size();
  for (size_t i = 0; i + bs <= tokens.size(); i += bs) {
    int32_t b = *pool.allocate();
    std::span<const int32_t> blk(tokens.data() + i, bs);
    uint64_t h = KvBlockPool::chain_hash(parent, blk);
    pool.register_full_block(b, h, parent, blk);
    parent = h;
    ids.push_back(b);
  }
  return ids;
}
}  // namespace

TEST_SUITE("unit.kv") {

TEST_CASE("blocks are handed out until none is left, and come back on release") {
  KvBlockPool pool(3, 4, true);
  auto a = pool.allocate(), b = pool.allocate(), c = pool.allocate();
  REQUIRE((a && b && c));
  CHECK(*a != *b);
  CHECK(*b != *c);
  CHECK_FALSE(pool.allocate().has_value());
  CHECK(pool.num_referenced() == 3);
  pool.retain(*b);
  pool.release(*b);
  CHECK(pool.num_available() == 0);
  pool.release(*b);
  CHECK(pool.num_available() == 1);
  CHECK(pool.allocate() == b);
  CHECK_THROWS_AS(KvBlockPool(0, 4, true), rs::Error);
}

TEST_CASE("releasing an unreferenced block is an error, not a silent corruption") {
  KvBlockPool pool(2, 4, true);
  auto a = pool.allocate();
  pool.release(*a);
  CHECK_THROWS_AS(pool.release(*a), rs::Error);
}

TEST_CASE("a registered prefix is found again after its owner releases it") {
  KvBlockPool pool(8, 4, true);
  std::vector<int32_t> toks = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  auto ids = fill_and_register(pool, toks);
  for (auto it = ids.rbegin(); it != ids.rend(); ++it) pool.release(*it);
  CHECK(pool.num_referenced() == 0);
  CHECK(pool.num_cached_unreferenced() == 3);

  std::vector<int32_t> query = {1, 2, 3, 4, 5, 6, 7, 8, 99, 98, 97, 96, 95};
  std::vector<uint64_t> hashes;
  auto hit = pool.match_prefix(query, 100, &hashes);
  CHECK(hit == std::vector<int32_t>{ids[0], ids[1]});
  CHECK(hashes.size() == 2);
  CHECK(pool.refcount(ids[0]) == 1);
  CHECK(pool.num_cached_unreferenced() == 1);
  // max_blocks caps the match (the engine always leaves one token to compute).
  auto capped = pool.match_prefix(toks, 1, nullptr);
  CHECK(capped == std::vector<int32_t>{ids[0]});
}

TEST_CASE("the hash chains: the same block after a different prefix is not a hit") {
  KvBlockPool pool(8, 2, true);
  auto ids = fill_and_register(pool, {1, 2, 3, 4});
  std::vector<int32_t> other = {9, 9, 3, 4};
  CHECK(pool.match_prefix(other, 10, nullptr).empty());
  CHECK(pool.match_prefix(std::vector<int32_t>{1, 2, 3, 4}, 10, nullptr).size() == 2);
}

TEST_CASE("unreferenced cached blocks are evicted least recently released first") {
  KvBlockPool pool(4, 2, true);
  auto a = fill_and_register(pool, {1, 2});
  auto b = fill_and_register(pool, {3, 4});
  auto c = fill_and_register(pool, {5, 6});
  pool.release(b[0]);
  pool.release(a[0]);
  pool.release(c[0]);
  // One free block first, then the oldest cached one (b), then a.
  auto f = pool.allocate();
  CHECK(pool.num_cached_unreferenced() == 3);
  auto e1 = pool.allocate();
  CHECK(e1 == b[0]);
  CHECK(pool.match_prefix(std::vector<int32_t>{3, 4}, 10, nullptr).empty());
  auto e2 = pool.allocate();
  CHECK(e2 == a[0]);
  // c is still cached and can be revived.
  CHECK(pool.match_prefix(std::vector<int32_t>{5, 6}, 10, nullptr) == std::vector<int32_t>{c[0]});
  CHECK_FALSE(pool.allocate().has_value());
  (void)f;
}

TEST_CASE("a second block with an already-cached hash does not replace the first") {
  KvBlockPool pool(4, 2, true);
  auto a = fill_and_register(pool, {1, 2});
  auto b = fill_and_register(pool, {1, 2});
  pool.release(a[0]);
  pool.release(b[0]);
  // b was never registered, so it went straight back to the free list.
  CHECK(pool.num_cached_unreferenced() == 1);
  CHECK(pool.match_prefix(std::vector<int32_t>{1, 2}, 10, nullptr) == a);
}

TEST_CASE("prefix caching off: nothing is cached or matched") {
  KvBlockPool pool(4, 2, false);
  auto a = fill_and_register(pool, {1, 2});
  pool.release(a[0]);
  CHECK(pool.num_cached_unreferenced() == 0);
  CHECK(pool.match_prefix(std::vector<int32_t>{1, 2, 3}, 10, nullptr).empty());
}

TEST_CASE("hit and miss counters add up in tokens") {
  KvBlockPool pool(4, 2, true);
  pool.count_query(10, 4);
  pool.count_query(6, 0);
  CHECK(pool.query_tokens() == 16);
  CHECK(pool.hit_tokens() == 4);
}

}
