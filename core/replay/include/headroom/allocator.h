#pragma once
// A model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator.cpp): what it
// reserves from the device for a stream of allocations and frees. It decides "peak reserved",
// the number that, plus the CUDA context, meets the card (docs/estimator.md, "Allocator").

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace headroom {

// PYTORCH_CUDA_ALLOC_CONF, the parts that change what is reserved.
struct AllocatorConfig
{
    bool expandableSegments = false;          // expandable_segments:True
    int64_t maxSplitBytes = INT64_MAX;        // max_split_size_mb (blocks at least this big are not split)
    double garbageCollectionThreshold = 0.0;  // garbage_collection_threshold (needs a memory cap to act)
    int roundupPower2Divisions = 0;           // roundup_power2_divisions:N (one value for all sizes)
    int64_t capacityBytes = INT64_MAX;        // what cudaMalloc may get in all (the card minus the context)

    std::string describe() const; // back to PYTORCH_CUDA_ALLOC_CONF syntax ("" for the defaults)
};

// Parses PYTORCH_CUDA_ALLOC_CONF ("expandable_segments:True,max_split_size_mb:128"). Throws
// InputError naming `field` and the offending entry.
AllocatorConfig parseAllocConf(const std::string &text, const std::string &field = "alloc_conf");

// The caching allocator, replayed. Sizes are the requested bytes; the model rounds them as
// the allocator does. Ids are the caller's: an allocation's id is what its free names.
class CachingAllocatorModel
{
public:
    explicit CachingAllocatorModel(const AllocatorConfig &config = {});
    ~CachingAllocatorModel();
    CachingAllocatorModel(const CachingAllocatorModel &) = delete;
    CachingAllocatorModel &operator=(const CachingAllocatorModel &) = delete;

    // False when the device cannot give the memory even after freeing the cache (an OOM).
    // `stream`: the CUDA stream it is allocated on (0 the default one); blocks are cached per
    // stream and only a request on their stream reuses them.
    bool malloc(uint32_t id, int64_t requestedBytes, int stream = 0);
    void free(uint32_t id);
    // Where a recorded run's cudaMalloc put each segment (address, bytes), in order: the model puts
    // its segments there while its requests match the record's sizes, so that best fit breaks ties
    // between equal free blocks by the real addresses. Without it (an estimate), segments are laid
    // out in order.
    void useSegmentAddresses(std::vector<std::pair<int64_t, int64_t>> recorded);
    // torch.cuda.empty_cache(): every wholly free segment goes back to the device.
    void emptyCache();

    int64_t allocatedBytes() const { return m_allocated; }
    int64_t reservedBytes() const { return m_reserved; }
    int64_t peakAllocatedBytes() const { return m_peakAllocated; }
    int64_t peakReservedBytes() const { return m_peakReserved; }
    void resetPeaks();
    int64_t allocRetries() const { return m_retries; }
    int64_t ooms() const { return m_ooms; }
    int64_t segments() const { return m_segmentCount; }
    // Bytes reserved but not handed out, split into pieces too small to serve `bytes`.
    int64_t largestFreeBlockBytes() const;
    // Every segment of the large pool in address order, each as its blocks' signed sizes
    // (negative: free), for inspecting fragmentation.
    std::vector<std::vector<int64_t>> largeSegments() const;

    static int64_t roundSize(int64_t bytes, int divisions = 0);

private:
    struct Impl;
    std::unique_ptr<Impl> d;
    int64_t m_allocated = 0;
    int64_t m_reserved = 0;
    int64_t m_peakAllocated = 0;
    int64_t m_peakReserved = 0;
    int64_t m_retries = 0;
    int64_t m_ooms = 0;
    int64_t m_segmentCount = 0;
};

} // namespace headroom
