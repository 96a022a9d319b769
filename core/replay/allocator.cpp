// See Note [Caching allocator] (docs/estimator.md).
// A model of PyTorch's CUDA caching allocator, rule for rule from
// c10/cuda/CUDACachingAllocator.cpp (PyTorch 2.x): 512-byte rounding; a small pool (requests up
// to 1 MiB, carved from 2 MiB segments) and a large pool (requests under 10 MiB carved from
// 20 MiB segments, larger ones in their own segment rounded to 2 MiB); best fit over free blocks
// ordered by (size, address); splitting when the remainder is over 1 MiB (large pool) or at
// least 512 bytes (small pool, and expandable segments); merging of free neighbours; on a
// failed cudaMalloc, freeing oversize cached blocks (max_split_size) and then the whole cache
// before retrying; expandable segments that map 2 MiB (small) or 20 MiB (large) pages at the
// lowest address that fits. Addresses are modelled: segments are laid out in order. Blocks are
// cached per CUDA stream (BlockPool orders them by stream, then size): a request reuses only its
// own stream's blocks and expandable segments, as FSDP2's side streams need.

#include "headroom/allocator.h"

#include "headroom/error.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <new>
#include <deque>
#include <limits>
#include <set>
#include <sstream>

namespace headroom {

namespace {

constexpr int64_t kMinBlockSize = 512;
constexpr int64_t kSmallSize = 1048576;
constexpr int64_t kSmallBuffer = 2097152;
constexpr int64_t kMinLargeAlloc = 10485760;
constexpr int64_t kRoundLarge = 2097152;
constexpr int64_t kLargeBuffer = 20971520;
// Address space of one expandable segment: more than any card (the allocator reserves 1 1/8 of
// the card's memory; a model needs only "enough").
constexpr int64_t kExpandableSpace = int64_t(1) << 50;

struct Pool;

struct Block
{
    int64_t size = 0;
    int64_t addr = 0;
    Block *prev = nullptr;
    Block *next = nullptr;
    Pool *pool = nullptr;
    bool allocated = false;
    bool mapped = true;
    bool expandable = false;
    int stream = 0; // the CUDA stream its segment was made for: only that stream reuses it
    int64_t gcCountBase = 0;
    bool isSplit() const { return prev != nullptr || next != nullptr; }
};

struct ByAddr
{
    bool operator()(const Block *a, const Block *b) const { return a->addr < b->addr; }
};

// A free block as BlockComparatorSize orders a BlockPool: by stream, then size, then address.
struct FreeKey
{
    int stream;
    int64_t size;
    int64_t addr;
    Block *b;
};

// One pool's free blocks in that order: buckets of one (stream, size), each its blocks by address,
// the buckets in a vector sorted by (stream, size). Best fit is a binary search over the buckets,
// and the lowest address is the bucket's first. A red-black tree of the blocks (std::set, nodes
// from a free list) and Abseil's B-tree were slower: most of the replay went to their descents.
// Llama-3.1-70B with checkpointing keeps up to ~1,000 free blocks in the large pool, in 100-250
// sizes, one of them ~490 times (blocks of one size, taken and freed at both ends of the address
// range), and most sizes come and go singly.
class FreeBlocks
{
    struct Entry
    {
        int64_t addr;
        Block *b;
    };
    // One (stream, size): its blocks by address in buf[lo, hi), with room at both ends so that an
    // insert or erase moves only the entries on its nearer side. Trivially copyable (the buffer is
    // FreeBlocks' to free), so that making or dropping a bucket moves the ones after it as one
    // memmove.
    struct Bucket
    {
        int stream;
        int64_t size;
        Entry *buf;
        uint32_t cap, lo, hi; // never empty
        size_t count() const { return hi - lo; }
        const Entry &operator[](size_t i) const { return buf[lo + i]; }
        size_t find(int64_t addr) const // index of the first entry at or above addr
        {
            // Branch-free halving: the comparisons are coin flips, which a branch mispredicts.
            const Entry *first = buf + lo;
            size_t len = hi - lo;
            while (len > 0) {
                const size_t half = len / 2;
                const bool below = first[half].addr < addr;
                first = below ? first + half + 1 : first;
                len = below ? len - half - 1 : half;
            }
            return static_cast<size_t>(first - (buf + lo));
        }
        void insert(size_t i, Entry e)
        {
            const size_t n = count();
            if (lo > 0 && (i < n / 2 || hi == cap)) {
                std::memmove(buf + lo - 1, buf + lo, i * sizeof(Entry));
                --lo;
            } else if (hi < cap) {
                std::memmove(buf + lo + i + 1, buf + lo + i, (n - i) * sizeof(Entry));
                ++hi;
            } else { // full: twice the room, the entries in its middle
                const uint32_t grownCap = static_cast<uint32_t>(std::max<size_t>(8, 2 * (n + 1)));
                Entry *grown = static_cast<Entry *>(std::malloc(grownCap * sizeof(Entry)));
                if (!grown)
                    throw std::bad_alloc();
                const uint32_t nlo = static_cast<uint32_t>((grownCap - (n + 1)) / 2);
                if (n > 0) { // a new bucket has no buffer yet
                    std::memcpy(grown + nlo, buf + lo, i * sizeof(Entry));
                    std::memcpy(grown + nlo + i + 1, buf + lo + i, (n - i) * sizeof(Entry));
                }
                std::free(buf);
                buf = grown;
                cap = grownCap;
                lo = nlo;
                hi = static_cast<uint32_t>(nlo + n + 1);
            }
            buf[lo + i] = e;
        }
        void erase(size_t i)
        {
            const size_t n = count();
            if (i < n / 2) {
                std::memmove(buf + lo + 1, buf + lo, i * sizeof(Entry));
                ++lo;
            } else {
                std::memmove(buf + lo + i, buf + lo + i + 1, (n - i - 1) * sizeof(Entry));
                --hi;
            }
        }
    };
    std::vector<Bucket> m_buckets; // sorted by (stream, size)
    std::vector<Bucket> m_spare;   // emptied buckets, their buffers kept for reuse
    size_t m_count = 0;

    size_t bucketAtOrAfter(int stream, int64_t size) const
    {
        const Bucket *first = m_buckets.data();
        size_t len = m_buckets.size();
        while (len > 0) { // branch-free, as Bucket::find
            const size_t half = len / 2;
            const Bucket &k = first[half];
            const bool below = (k.stream < stream) | ((k.stream == stream) & (k.size < size));
            first = below ? first + half + 1 : first;
            len = below ? len - half - 1 : half;
        }
        return static_cast<size_t>(first - m_buckets.data());
    }
    bool holds(size_t k, int stream, int64_t size) const
    {
        return k < m_buckets.size() && m_buckets[k].stream == stream && m_buckets[k].size == size;
    }
    void eraseAt(size_t k, size_t i)
    {
        Bucket &v = m_buckets[k];
        v.erase(i);
        --m_count;
        if (v.count() == 0) {
            v.lo = v.hi = v.cap / 2; // room on both sides when it is used again
            m_spare.push_back(v);
            m_buckets.erase(m_buckets.begin() + static_cast<std::ptrdiff_t>(k));
        }
    }

public:
    // A position in (stream, size, address) order; invalidated by insert and by erasing at or
    // before it.
    class iterator
    {
        friend class FreeBlocks;
        const FreeBlocks *s = nullptr;
        size_t bk = 0, i = 0;
        iterator(const FreeBlocks *set, size_t bucket, size_t index)
            : s(set)
            , bk(bucket)
            , i(index)
        {
        }

    public:
        struct Arrow
        {
            FreeKey k;
            const FreeKey *operator->() const { return &k; }
        };
        FreeKey operator*() const
        {
            const Bucket &b = s->m_buckets[bk];
            return FreeKey{b.stream, b.size, b[i].addr, b[i].b};
        }
        Arrow operator->() const { return Arrow{**this}; }
        iterator &operator++()
        {
            if (++i == s->m_buckets[bk].count()) {
                ++bk;
                i = 0;
            }
            return *this;
        }
        iterator &operator--()
        {
            if (i == 0) {
                --bk;
                i = s->m_buckets[bk].count() - 1;
            } else {
                --i;
            }
            return *this;
        }
        bool operator==(const iterator &o) const { return bk == o.bk && i == o.i; }
        bool operator!=(const iterator &o) const { return !(*this == o); }
    };

    FreeBlocks() = default;
    FreeBlocks(const FreeBlocks &) = delete;
    FreeBlocks &operator=(const FreeBlocks &) = delete;
    ~FreeBlocks()
    {
        for (const Bucket &b : m_buckets)
            std::free(b.buf);
        for (const Bucket &b : m_spare)
            std::free(b.buf);
    }

    iterator begin() const { return iterator(this, 0, 0); }
    iterator end() const { return iterator(this, m_buckets.size(), 0); }
    size_t size() const { return m_count; }
    // The first block at or after (stream, size, lowest address).
    iterator lower_bound(int stream, int64_t size) const { return iterator(this, bucketAtOrAfter(stream, size), 0); }

    void insert(const FreeKey &key)
    {
        const size_t k = bucketAtOrAfter(key.stream, key.size);
        if (!holds(k, key.stream, key.size)) {
            Bucket nb{key.stream, key.size, nullptr, 0, 0, 0};
            if (!m_spare.empty()) {
                nb.buf = m_spare.back().buf;
                nb.cap = m_spare.back().cap;
                nb.lo = nb.hi = nb.cap / 2;
                m_spare.pop_back();
            }
            m_buckets.insert(m_buckets.begin() + static_cast<std::ptrdiff_t>(k), nb);
        }
        Bucket &v = m_buckets[k];
        v.insert(v.find(key.addr), Entry{key.addr, key.b});
        ++m_count;
    }
    // Erases the block with this key, if it is here.
    void erase(int stream, int64_t size, int64_t addr)
    {
        const size_t k = bucketAtOrAfter(stream, size);
        if (!holds(k, stream, size))
            return;
        const Bucket &v = m_buckets[k];
        const size_t at = v.find(addr);
        if (at < v.count() && v[at].addr == addr)
            eraseAt(k, at);
    }
    void erase(iterator it) { eraseAt(it.bk, it.i); }
};

struct Pool
{
    bool small = false;
    FreeBlocks blocks; // free, mapped
    std::set<Block *, ByAddr> unmapped;  // expandable address space not backed by pages
    int64_t getFreeBlocksCalls = 0;
    void insert(Block *b)
    {
        b->gcCountBase = getFreeBlocksCalls;
        blocks.insert(FreeKey{b->stream, b->size, b->addr, b});
    }
    void erase(const Block *b) { blocks.erase(b->stream, b->size, b->addr); }
    std::vector<Block *> freeBlocks() const
    {
        std::vector<Block *> v;
        v.reserve(blocks.size());
        for (const FreeKey k : blocks)
            v.push_back(k.b);
        return v;
    }
};

int64_t roundupPower2NextDivision(int64_t size, int divisions)
{
    auto isPow2 = [](uint64_t v) { return v && !(v & (v - 1)); };
    if (isPow2(static_cast<uint64_t>(size)))
        return size;
    uint64_t floor2 = uint64_t(1) << (63 - __builtin_clzll(static_cast<uint64_t>(size)));
    int log2div = 63 - __builtin_clzll(static_cast<uint64_t>(divisions));
    const uint64_t div = floor2 >> log2div;
    if (div == 0)
        return static_cast<int64_t>(floor2 << 1);
    const uint64_t roundFloor = static_cast<uint64_t>(size) & ~(div - 1);
    return static_cast<int64_t>(roundFloor == static_cast<uint64_t>(size) ? roundFloor : roundFloor + div);
}

int64_t allocationSize(int64_t size)
{
    if (size <= kSmallSize)
        return kSmallBuffer;
    if (size < kMinLargeAlloc)
        return kLargeBuffer;
    return kRoundLarge * ((size + kRoundLarge - 1) / kRoundLarge);
}

} // namespace

struct CachingAllocatorModel::Impl
{
    CachingAllocatorModel &q;
    AllocatorConfig cfg;
    Pool small;
    Pool large;
    std::vector<Block *> byId;      // live allocations by the caller's id
    std::vector<Block *> segments;  // every block ever made, for deletion
    int64_t nextAddr = int64_t(1) << 60;
    std::vector<std::pair<int64_t, int64_t>> recorded; // real (address, bytes) of each cudaMalloc
    size_t nextRecorded = 0;

    Impl(CachingAllocatorModel &owner, const AllocatorConfig &c)
        : q(owner)
        , cfg(c)
    {
        small.small = true;
    }
    std::deque<Block> all;        // owner of every Block (a deque keeps their addresses)
    std::vector<Block *> dropped; // merged or released, for make() to reuse: the replay's
                                  // blocks stay in a few hot cache lines instead of new ones

    Block *make(int64_t size, int64_t addr, Pool *pool, int stream)
    {
        Block *b = nullptr;
        if (!dropped.empty()) {
            b = dropped.back();
            dropped.pop_back();
            *b = Block{};
        } else {
            b = &all.emplace_back();
        }
        b->size = size;
        b->addr = addr;
        b->pool = pool;
        b->stream = stream;
        return b;
    }
    // Its callers have unlinked it from its segment, the free-block buckets and the unmapped set.
    void destroy(Block *b) { dropped.push_back(b); }

    void addReserved(int64_t bytes)
    {
        q.m_reserved += bytes;
        q.m_peakReserved = std::max(q.m_peakReserved, q.m_reserved);
    }

    bool getFreeBlock(Pool &pool, int stream, int64_t size, Block *&out)
    {
        if (cfg.garbageCollectionThreshold > 0.0 && cfg.capacityBytes != INT64_MAX)
            ++pool.getFreeBlocksCalls;
        auto it = pool.blocks.lower_bound(stream, size);
        if (it == pool.blocks.end() || it->stream != stream)
            return false;
        if (it->b->expandable && cfg.expandableSegments) {
            // An expandable block's fit counts the unmapped space right after it.
            auto expandableSize = [](const Block *b) {
                return b->size + (b->next && !b->next->mapped ? b->next->size : 0);
            };
            auto next = it;
            ++next;
            while (it->b->expandable && next != pool.blocks.end() && next->stream == stream &&
                   expandableSize(next->b) < expandableSize(it->b)) {
                it = next;
                ++next;
            }
        }
        if (size < cfg.maxSplitBytes && it->size >= cfg.maxSplitBytes)
            return false;
        if (size >= cfg.maxSplitBytes && it->size >= size + kLargeBuffer)
            return false;
        out = it->b;
        pool.blocks.erase(it);
        return true;
    }

    size_t tryMerge(Block *dst, Block *src, Pool &pool)
    {
        if (!src || src->allocated || dst->mapped != src->mapped)
            return 0;
        if (src->mapped)
            pool.erase(src); // before its size or address changes: the set is keyed on them
        if (dst->prev == src) {
            dst->addr = src->addr;
            dst->prev = src->prev;
            if (dst->prev)
                dst->prev->next = dst;
        } else {
            dst->next = src->next;
            if (dst->next)
                dst->next->prev = dst;
        }
        const int64_t subsumed = src->size;
        dst->size += subsumed;
        if (!src->mapped)
            pool.unmapped.erase(src);
        destroy(src);
        return static_cast<size_t>(subsumed);
    }

    // cudaMalloc of a new segment, or pages of an expandable one.
    bool allocBlock(Pool &pool, int stream, int64_t size, int64_t allocSize, bool retry, Block *&out)
    {
        if (retry)
            ++q.m_retries;
        if (cfg.expandableSegments)
            return allocExpandable(pool, stream, size, out);
        if (q.m_reserved + allocSize > cfg.capacityBytes)
            return false;
        int64_t at = 0;
        if (nextRecorded < recorded.size() && recorded[nextRecorded].second == allocSize) {
            at = recorded[nextRecorded++].first; // where the recorded run's cudaMalloc put it
        } else {
            nextRecorded = recorded.size(); // the replay left the record: lay segments out in order
            nextAddr -= allocSize + kRoundLarge; // segments do not touch: no merging across them
            at = nextAddr;
        }
        out = make(allocSize, at, &pool, stream);
        addReserved(allocSize);
        ++q.m_segmentCount;
        return true;
    }

    // An expandable segment serves one stream (find_expandable_block matches segment->stream()).
    Block *findExpandable(Pool &pool, int stream, int64_t size)
    {
        auto allocatable = [](const Block *b) { return b && !b->allocated; };
        auto room = [&](Block *b) {
            int64_t bytes = 0;
            while (bytes < size && allocatable(b)) {
                bytes += b->size;
                b = b->next;
            }
            return bytes >= size;
        };
        for (Block *c : pool.unmapped) {
            if (c->stream != stream)
                continue;
            if (allocatable(c->prev))
                c = c->prev;
            if (room(c))
                return c;
        }
        Block *c = make(kExpandableSpace, nextAddr, &pool, stream);
        nextAddr += kExpandableSpace;
        c->mapped = false;
        c->expandable = true;
        pool.unmapped.insert(c);
        ++q.m_segmentCount;
        return c;
    }

    bool mapBlock(Block *b, int64_t size)
    {
        const int64_t page = b->pool->small ? kSmallBuffer : kLargeBuffer;
        // The segment's pages are aligned from its first byte; b starts on a page boundary.
        const int64_t mapped = std::min(b->size, ((size + page - 1) / page) * page);
        if (q.m_reserved + mapped > cfg.capacityBytes)
            return false;
        Pool &pool = *b->pool;
        pool.unmapped.erase(b);
        b->mapped = true;
        if (mapped < b->size) {
            Block *rest = make(b->size - mapped, b->addr + mapped, &pool, b->stream);
            rest->mapped = false;
            rest->expandable = true;
            rest->prev = b;
            rest->next = b->next;
            if (b->next)
                b->next->prev = rest;
            b->next = rest;
            pool.unmapped.insert(rest);
            b->size = mapped;
        }
        tryMerge(b, b->prev, pool);
        tryMerge(b, b->next, pool);
        pool.insert(b);
        addReserved(mapped);
        return true;
    }

    bool allocExpandable(Pool &pool, int stream, int64_t size, Block *&out)
    {
        Block *c = findExpandable(pool, stream, size);
        if (!c->mapped && !mapBlock(c, std::min(c->size, size)))
            return false;
        while (c->size < size) {
            Block *n = c->next;
            if (!n || !mapBlock(n, std::min(size - c->size, n->size)))
                return false;
            c = n;
        }
        pool.erase(c);
        out = c;
        return true;
    }

    void releaseBlock(Block *b)
    {
        Pool &pool = *b->pool;
        pool.erase(b);
        q.m_reserved -= b->size;
        --q.m_segmentCount;
        destroy(b);
    }

    // Unmaps the whole pages inside a free block of an expandable segment.
    void unmapFree(Block *b)
    {
        Pool &pool = *b->pool;
        const int64_t page = pool.small ? kSmallBuffer : kLargeBuffer;
        // Pages are aligned to the segment's start; a free block's interior pages can go.
        Block *head = b;
        while (head->prev)
            head = head->prev;
        const int64_t base = head->addr;
        const int64_t first = base + ((b->addr - base + page - 1) / page) * page;
        const int64_t last = base + ((b->addr + b->size - base) / page) * page;
        if (last <= first)
            return;
        pool.erase(b);
        Block *before = nullptr, *after = nullptr;
        if (first > b->addr) {
            before = make(first - b->addr, b->addr, &pool, b->stream);
            before->expandable = true;
        }
        if (b->addr + b->size > last) {
            after = make(b->addr + b->size - last, last, &pool, b->stream);
            after->expandable = true;
        }
        Block *gap = make(last - first, first, &pool, b->stream);
        gap->expandable = true;
        gap->mapped = false;
        Block *prev = b->prev, *next = b->next;
        std::vector<Block *> chain;
        if (before)
            chain.push_back(before);
        chain.push_back(gap);
        if (after)
            chain.push_back(after);
        for (size_t i = 0; i < chain.size(); ++i) {
            chain[i]->prev = i == 0 ? prev : chain[i - 1];
            chain[i]->next = i + 1 == chain.size() ? next : chain[i + 1];
        }
        if (prev)
            prev->next = chain.front();
        if (next)
            next->prev = chain.back();
        destroy(b);
        q.m_reserved -= last - first;
        if (before)
            pool.insert(before);
        if (after)
            pool.insert(after);
        pool.unmapped.insert(gap);
        tryMerge(gap, gap->prev, pool);
        tryMerge(gap, gap->next, pool);
    }

    bool releaseCached()
    {
        for (Pool *pool : {&large, &small}) {
            for (Block *b : pool->freeBlocks()) {
                if (b->expandable)
                    unmapFree(b);
                else if (!b->isSplit())
                    releaseBlock(b);
            }
        }
        return true;
    }

    // release_available_cached_blocks: the requesting stream's oversize cached blocks only.
    bool releaseAvailable(Pool &pool, int stream, int64_t size)
    {
        if (cfg.maxSplitBytes == INT64_MAX)
            return false;
        const int64_t want = size < cfg.maxSplitBytes ? cfg.maxSplitBytes : size;
        auto it = pool.blocks.lower_bound(stream, want);
        if (it == pool.blocks.end() || it->stream != stream || it->b->expandable) {
            if (it == pool.blocks.begin())
                return false;
            int64_t released = 0;
            --it;
            while (released < want && it->size >= cfg.maxSplitBytes && it->stream == stream) {
                auto cur = it;
                const bool isFirst = cur == pool.blocks.begin();
                if (!isFirst)
                    --it;
                Block *cb = cur->b;
                if (!cb->expandable) {
                    released += cb->size;
                    releaseBlock(cb);
                }
                if (isFirst)
                    break;
            }
            return released >= want;
        }
        releaseBlock(it->b);
        return true;
    }

    void garbageCollect()
    {
        const int64_t threshold =
            static_cast<int64_t>(cfg.garbageCollectionThreshold * static_cast<double>(cfg.capacityBytes));
        if (q.m_reserved <= threshold)
            return;
        const int64_t target = q.m_reserved - threshold;
        int64_t reclaimed = 0;
        for (bool freed = true; reclaimed < target && freed;) {
            double total = 0;
            int count = 0;
            for (const FreeKey k : large.blocks)
                if (const Block *b = k.b; !b->isSplit()) {
                    total += static_cast<double>(large.getFreeBlocksCalls - b->gcCountBase);
                    ++count;
                }
            if (count == 0)
                return;
            const double age = total / count;
            freed = false;
            for (Block *b : large.freeBlocks())
                if (!b->isSplit() && static_cast<double>(large.getFreeBlocksCalls - b->gcCountBase) >= age) {
                    freed = true;
                    reclaimed += b->size;
                    releaseBlock(b);
                }
        }
    }

    bool shouldSplit(const Block *b, int64_t size) const
    {
        const int64_t remaining = b->size - size;
        if (b->pool->small || cfg.expandableSegments)
            return remaining >= kMinBlockSize;
        return size < cfg.maxSplitBytes && remaining > kSmallSize;
    }
};

CachingAllocatorModel::CachingAllocatorModel(const AllocatorConfig &config)
    : d(std::make_unique<Impl>(*this, config))
{
}

CachingAllocatorModel::~CachingAllocatorModel() = default;

int64_t CachingAllocatorModel::roundSize(int64_t size, int divisions)
{
    if (size < kMinBlockSize)
        return kMinBlockSize;
    if (divisions > 1 && size > kMinBlockSize * divisions)
        return roundupPower2NextDivision(size, divisions);
    return kMinBlockSize * ((size + kMinBlockSize - 1) / kMinBlockSize);
}

bool CachingAllocatorModel::malloc(uint32_t id, int64_t requested, int stream)
{
    Impl &m = *d;
    const int64_t size = roundSize(std::max<int64_t>(requested, 0), m.cfg.roundupPower2Divisions);
    Pool &pool = size <= kSmallSize ? m.small : m.large;
    const int64_t allocSize = allocationSize(size);
    Block *block = nullptr;
    bool found = m.getFreeBlock(pool, stream, size, block);
    if (!found) {
        if (m.cfg.garbageCollectionThreshold > 0.0 && m.cfg.capacityBytes != INT64_MAX)
            m.garbageCollect();
        found = m.allocBlock(pool, stream, size, allocSize, false, block) ||
                (m.releaseAvailable(pool, stream, size) && m.allocBlock(pool, stream, size, allocSize, false, block)) ||
                (m.releaseCached() && m.allocBlock(pool, stream, size, allocSize, true, block));
    }
    if (!found) {
        ++m_ooms;
        return false;
    }
    if (m.shouldSplit(block, size)) {
        Block *rest = block;
        Block *b = m.make(size, rest->addr, &pool, rest->stream);
        b->expandable = rest->expandable;
        b->prev = rest->prev;
        if (b->prev)
            b->prev->next = b;
        b->next = rest;
        rest->prev = b;
        rest->addr += size;
        rest->size -= size;
        pool.insert(rest);
        block = b;
    }
    block->allocated = true;
    if (m.byId.size() <= id)
        m.byId.resize(std::max<size_t>(id + 1, m.byId.size() * 2), nullptr);
    m.byId[id] = block;
    m_allocated += block->size;
    m_peakAllocated = std::max(m_peakAllocated, m_allocated);
    return true;
}

void CachingAllocatorModel::free(uint32_t id)
{
    Impl &m = *d;
    if (id >= m.byId.size() || !m.byId[id])
        return; // freed twice, or never allocated (an OOM): nothing to do
    Block *block = m.byId[id];
    m.byId[id] = nullptr;
    block->allocated = false;
    m_allocated -= block->size;
    Pool &pool = *block->pool;
    m.tryMerge(block, block->prev, pool);
    m.tryMerge(block, block->next, pool);
    pool.insert(block);
}

void CachingAllocatorModel::useSegmentAddresses(std::vector<std::pair<int64_t, int64_t>> recorded)
{
    d->recorded = std::move(recorded);
    d->nextRecorded = 0;
}

void CachingAllocatorModel::emptyCache()
{
    d->releaseCached();
}

void CachingAllocatorModel::resetPeaks()
{
    m_peakAllocated = m_allocated;
    m_peakReserved = m_reserved;
}

int64_t CachingAllocatorModel::largestFreeBlockBytes() const
{
    int64_t best = 0;
    for (const Pool *p : {&d->large, &d->small})
        for (const FreeKey k : p->blocks) // ordered by stream first: every stream's largest
            best = std::max(best, k.size);
    return best;
}

std::vector<std::vector<int64_t>> CachingAllocatorModel::largeSegments() const
{
    std::set<const Block *, ByAddr> heads;
    auto collect = [&](const Block *b) {
        while (b->prev)
            b = b->prev;
        heads.insert(b);
    };
    for (const FreeKey k : d->large.blocks)
        collect(k.b);
    for (const Block *b : d->byId)
        if (b && b->pool == &d->large)
            collect(b);
    std::vector<std::vector<int64_t>> out;
    for (const Block *h : heads) {
        out.emplace_back();
        for (const Block *b = h; b; b = b->next)
            out.back().push_back(b->allocated ? b->size : -b->size);
    }
    return out;
}

std::string AllocatorConfig::describe() const
{
    std::string s;
    auto add = [&s](const std::string &kv) { s += (s.empty() ? "" : ",") + kv; };
    if (expandableSegments)
        add("expandable_segments:True");
    if (maxSplitBytes != INT64_MAX)
        add("max_split_size_mb:" + std::to_string(maxSplitBytes / 1048576));
    if (garbageCollectionThreshold > 0.0) {
        std::ostringstream o;
        o << garbageCollectionThreshold;
        add("garbage_collection_threshold:" + o.str());
    }
    if (roundupPower2Divisions > 0)
        add("roundup_power2_divisions:" + std::to_string(roundupPower2Divisions));
    return s;
}

AllocatorConfig parseAllocConf(const std::string &text, const std::string &field)
{
    AllocatorConfig c;
    if (text.size() > 1000)
        throw InputError(field, text.substr(0, 40) + "...", "too long for PYTORCH_CUDA_ALLOC_CONF");
    std::stringstream in(text);
    for (std::string item; std::getline(in, item, ',');) {
        item.erase(0, item.find_first_not_of(" \t"));
        item.erase(item.find_last_not_of(" \t") + 1);
        if (item.empty())
            continue;
        const auto colon = item.find(':');
        if (colon == std::string::npos)
            throw InputError(field, item, "expected key:value (e.g. expandable_segments:True)");
        const std::string key = item.substr(0, colon), value = item.substr(colon + 1);
        auto number = [&](double lo, double hi) {
            char *end = nullptr;
            const double v = std::strtod(value.c_str(), &end);
            if (value.empty() || *end != '\0' || !(v >= lo && v <= hi))
                throw InputError(field, item,
                                 key + " needs a number between " + std::to_string(lo) + " and " + std::to_string(hi));
            return v;
        };
        if (key == "expandable_segments") {
            if (value != "True" && value != "False" && value != "true" && value != "false")
                throw InputError(field, item, "expandable_segments is True or False");
            c.expandableSegments = value == "True" || value == "true";
        } else if (key == "max_split_size_mb") {
            c.maxSplitBytes = static_cast<int64_t>(number(21, 1 << 24)) * 1048576; // PyTorch's minimum is > 20 MiB
        } else if (key == "garbage_collection_threshold") {
            c.garbageCollectionThreshold = number(0.0, 0.999999);
            if (c.garbageCollectionThreshold <= 0.0)
                throw InputError(field, item, "garbage_collection_threshold must be above 0 and below 1");
        } else if (key == "roundup_power2_divisions") {
            const int v = static_cast<int>(number(1, 64));
            if (v & (v - 1))
                throw InputError(field, item, "roundup_power2_divisions must be a power of two");
            c.roundupPower2Divisions = v;
        } else if (key == "backend" || key == "release_lock_on_cudamalloc" || key == "pinned_use_cuda_host_register" ||
                   key == "pinned_num_register_threads" || key == "pinned_use_background_threads") {
            // Accepted by PyTorch; no effect on what is reserved.
        } else {
            throw InputError(field, item,
                             "unknown key (known: expandable_segments, max_split_size_mb, garbage_collection_threshold, "
                             "roundup_power2_divisions)");
        }
    }
    return c;
}

} // namespace headroom
