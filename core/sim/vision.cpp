// Issue 30: Qwen2.5-VL's vision side as Transformers 5.17 runs it (models/qwen2_5_vl/
// modeling_qwen2_5_vl.py: Qwen2_5_VisionTransformerPretrainedModel.forward, Qwen2_5_VLModel.forward),
// frozen, in the order the H200/H100 allocator timelines of tests/data/h200/vl-2026-12-05 show it.
// See Note [Vision step] (docs/estimator.md).
#include "vision.h"

#include "headroom/error.h"

#include <algorithm>

namespace headroom::sim {

namespace {

// The tower's chunks of attention for one frame of h x w patches: get_vision_window_index's
// windows of windowSize pixels (windowSize / patch / merge merged tokens a side, the grid padded
// by a whole window where it divides evenly; the empty windows fall out in unique_consecutive),
// row by row, each its rows of patches.
void windowChunks(const ModelArch::VisionSide &v, int64_t h, int64_t w, std::vector<int64_t> &out)
{
    const int64_t merge = v.merge, side = std::max<int64_t>(1, v.tower.windowSize / merge / v.patch);
    const int64_t lh = h / merge, lw = w / merge;
    const int64_t nh = (lh + side - lh % side) / side, nw = (lw + side - lw % side) / side;
    for (int64_t i = 0; i < nh; ++i)
        for (int64_t j = 0; j < nw; ++j) {
            const int64_t rows = std::clamp<int64_t>(lh - i * side, 0, side), cols = std::clamp<int64_t>(lw - j * side, 0, side);
            if (rows * cols > 0)
                out.push_back(rows * cols * merge * merge);
        }
}

// Qwen2_5_VLRMSNorm over `rows` x `width` values in `elem` without autograd: the fp32 copy, its square
// and mean, the reciprocal root, the normalised fp32 rows (the copy goes when the name rebinds),
// the cast back and the weight's product; the variance is a local to the end.
T rmsNorm(Sim &S, int64_t rows, int64_t width, int elem)
{
    T x32 = S.make(rows * width * 4, 4);
    T sq = S.make(x32.bytes, 4);
    T var = S.make(rows * 4, 4);
    S.drop(sq);
    T eps = S.make(rows * 4, 4);
    T rs = S.make(rows * 4, 4);
    S.drop(eps);
    T normed = S.make(x32.bytes, 4);
    S.drop(rs);
    S.drop(x32);
    T cast = S.make(rows * width * elem, elem);
    T out = S.make(cast.bytes, elem);
    S.drop(cast);
    S.drop(normed);
    S.drop(var);
    return out;
}

// apply_rotary_pos_emb_vision's half for one of q and k (already fp32, `bytes` of them): q * cos,
// rotate_half (the negated half, then the cat), times sin, the sum.
T rotate(Sim &S, int64_t bytes)
{
    T qc = S.make(bytes, 4);
    T neg = S.make(bytes / 2, 4);
    T cat = S.make(bytes, 4);
    S.drop(neg);
    T qs = S.make(bytes, 4);
    S.drop(cat);
    T sum = S.make(bytes, 4);
    S.drop(qc);
    S.drop(qs);
    return sum;
}

// One Qwen2_5_VLVisionBlock without autograd over `x` [N, H]; `chunks` the attention's
// (windows, or whole frames in the full-attention blocks).
T block(Sim &S, const ModelArch::VisionSide &v, const T &x, const std::vector<int64_t> &chunks, int elem)
{
    const auto &t = v.tower;
    const int64_t H = t.hidden, N = x.bytes / (H * elem);
    S.setOp("visual.norm1");
    T n1 = rmsNorm(S, N, H, elem);
    S.setOp("visual.attn");
    T qkv = S.make(N * 3 * H * elem, elem);
    T q32 = S.make(N * H * 4, 4), k32 = S.make(N * H * 4, 4);
    T qr = rotate(S, q32.bytes);
    T kr = rotate(S, k32.bytes);
    T q = S.make(N * H * elem, elem);
    S.drop(qr);
    T k = S.make(N * H * elem, elem);
    S.drop(kr);
    S.drop(q32);
    S.drop(k32);
    // lengths (int32, one a chunk), then SDPA a chunk at a time, each output made contiguous and
    // kept for the cat (the flash kernel's Philox seed and offset and a 256-byte buffer, made and
    // freed around each chunk in the same small block, are left out: a window is about 64 patches,
    // so an image of a thousand windows would be thousands of events a block for 272 bytes)
    T lengths = S.make(static_cast<int64_t>(chunks.size()) * 4, 4);
    std::vector<T> outs;
    outs.reserve(chunks.size());
    for (int64_t n : chunks)
        outs.push_back(S.make(n * H * elem, elem));
    T cat = S.make(N * H * elem, elem);
    T proj = S.make(N * H * elem, elem);
    S.drop(cat);
    S.drop(lengths);
    S.drop(qkv);
    S.drop(q);
    S.drop(k);
    for (T &o : outs)
        S.drop(o);
    S.drop(n1);
    T h1 = S.make(N * H * elem, elem); // hidden_states + attn(...)
    S.drop(proj);
    S.setOp("visual.norm2");
    T n2 = rmsNorm(S, N, H, elem);
    S.setOp("visual.mlp");
    const int64_t I = t.inter;
    T gate = S.make(N * I * elem, elem);
    T act = S.make(gate.bytes, elem);
    S.drop(gate);
    T up = S.make(gate.bytes, elem);
    T prod = S.make(gate.bytes, elem);
    S.drop(act);
    S.drop(up);
    T down = S.make(N * H * elem, elem);
    S.drop(prod);
    S.drop(n2);
    T h2 = S.make(N * H * elem, elem);
    S.drop(down);
    S.drop(h1);
    return h2;
}

} // namespace

T qwen25Tower(Sim &S, const ModelArch::VisionSide &v, const TowerCall &call, int elem)
{
    const auto &t = v.tower;
    const int64_t N = call.patches(), H = t.hidden, unit = v.merge * v.merge, merged = N / unit;
    const int64_t hd = H / t.heads;
    if (N <= 0 || N % unit != 0)
        throw InputError("vision", std::to_string(N), "patches do not merge into whole tokens");
    S.setOp("visual.inputs");
    // pixel_values.type(self.visual.dtype): the processor's fp32 rows cast to the tower's dtype
    T pixels = S.make(N * t.inputWidth * elem, elem);
    // get_vision_position_ids' (N, 2) int64 rows, kept to the end of forward (its helpers and the
    // window index's few hundred bytes are left out)
    T positions = S.make(N * 2 * 8, 8);
    S.setOp("visual.patch_embed");
    T conv = S.make(N * H * elem, elem); // Conv3d with stride = kernel: one row a patch
    // permute_input_for_window_attn: the window index as int64, then the rows gathered
    T index = S.make(merged * 8, 8);
    T hidden = S.make(conv.bytes, elem);
    S.drop(index);
    S.drop(conv);
    // Qwen2_5_VLVisionRotaryEmbedding: positions as fp32, the (N, 2, hd / 4) frequencies, cos and
    // sin (each times attention_scaling), recomposed into [h | w | h | w] (N, hd) fp32, then
    // gathered into window order
    S.setOp("visual.rotary");
    const int64_t quarter = N * 2 * (hd / 4) * 4;
    T pos32 = S.make(N * 2 * 4, 4);
    T freqs = S.make(quarter, 4);
    T c0 = S.make(quarter, 4), c1 = S.make(quarter, 4);
    S.drop(c0);
    T s0 = S.make(quarter, 4), s1 = S.make(quarter, 4);
    S.drop(s0);
    std::array<T, 2> tables;
    for (T *f : {&c1, &s1}) {
        T hw = S.make(N * (hd / 2) * 4, 4);
        tables[f == &c1 ? 0 : 1] = S.make(N * hd * 4, 4);
        S.drop(hw);
        S.drop(*f);
    }
    S.drop(pos32);
    S.drop(freqs);
    std::array<T, 2> permuted;
    for (int i = 0; i < 2; ++i) {
        T idx = S.make(merged * 8, 8);
        permuted[static_cast<size_t>(i)] = S.make(N * hd * 4, 4);
        S.drop(idx);
    }
    for (T &table : tables)
        S.drop(table);
    // the chunks: windows (per frame, in order) and whole frames
    std::vector<int64_t> windows, frames;
    for (int64_t b = 0; b < call.blocks; ++b)
        for (int64_t f = 0; f < call.grid[0]; ++f) {
            windowChunks(v, call.grid[1], call.grid[2], windows);
            frames.push_back(call.grid[1] * call.grid[2]);
        }
    for (int64_t l = 0; l < t.depth; ++l) {
        S.setLayer(-1);
        const bool full = std::find(t.fullAttention.begin(), t.fullAttention.end(), l) != t.fullAttention.end();
        T next = block(S, v, hidden, full ? frames : windows, elem);
        S.drop(hidden);
        hidden = next;
    }
    // the merger: ln_q, then Linear(M, M), GELU, Linear(M, out) over the merged rows, then back to
    // the patches' order (argsort of the window index)
    S.setOp("visual.merger");
    T nq = rmsNorm(S, N, H, elem);
    const int64_t M = H * unit;
    T l1 = S.make(merged * M * elem, elem);
    T gelu = S.make(l1.bytes, elem);
    S.drop(l1);
    T l2 = S.make(merged * t.outHidden * elem, elem);
    S.drop(gelu);
    S.drop(nq);
    T reverse = S.make(merged * 8, 8);
    T ordered = S.make(l2.bytes, elem);
    S.drop(reverse);
    S.drop(l2);
    // the tower returns: its locals go, then get_image_features' split sizes, the cast pixels and
    // the output object's last_hidden_state
    S.drop(positions);
    for (T &p : permuted)
        S.drop(p);
    S.setOp("visual.split");
    T sizes = S.make(call.blocks * 8, 8), sizes2 = S.make(call.blocks * 8, 8);
    S.drop(sizes);
    S.drop(sizes2);
    S.drop(pixels);
    S.drop(hidden);
    // Qwen2_5_VLModel.forward: torch.cat of the per-image features (a copy), the split's base gone
    S.setOp("visual.features");
    T features = S.make(ordered.bytes, elem);
    S.drop(ordered);
    return features;
}

std::array<T, 2> placeholderMasks(Sim &S, int64_t tokens)
{
    S.setOp("placeholder_mask");
    T image = S.make(tokens, 1), video = S.make(tokens, 1); // input_ids == image_token_id, video_token_id
    // the checks: the count, the comparison with the features' size, torch_compilable_check
    T count = S.make(8, 8);
    T wide = S.make(tokens * 8, 8);
    S.drop(wide);
    T product = S.make(8, 8), equal = S.make(1, 1);
    S.drop(product);
    T check = S.make(1, 1);
    S.drop(check);
    S.drop(equal);
    T count2 = S.make(8, 8);
    T wide2 = S.make(tokens * 8, 8);
    S.drop(wide2);
    S.drop(count2);
    S.drop(count);
    return {image, video};
}

T maskedScatter(Sim &S, const T &embeds, const T &mask)
{
    S.setOp("masked_scatter");
    const int64_t n = embeds.bytes / embeds.elem;
    T out = S.make(embeds.bytes, embeds.elem); // self.clone(), scattered into in place
    // masked_scatter_cuda: the expanded mask made contiguous, its exclusive prefix sum in int64 by
    // CUB's DeviceScan, whose scan state is 16 bytes a tile of 896 items plus 48 tiles' padding,
    // aligned to 256 bytes, and 255 more for its own alignment
    T prefix = S.make(n * 8, 8);
    T dense = S.make(n, 1);
    const int64_t tiles = (n + 895) / 896;
    T scan = S.make(((tiles + 48) * 16 + 255) / 256 * 256 + 255, 1);
    S.drop(scan);
    S.drop(dense);
    S.drop(prefix);
    if (!S.gradEnabled() || !embeds.requiresGrad)
        return out;
    const int64_t bytes = embeds.bytes;
    // MaskedScatterBackward0: self's gradient is grad.masked_fill(mask, 0); the features' (the
    // frozen tower's) is not asked for
    S.record({&out}, {&embeds}, {mask.sto}, [bytes](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        if (!needs[0] || g[0] < 0)
            return std::vector<int>{-1};
        return std::vector<int>{s.allocate(bytes, Category::Temporaries)};
    });
    return out;
}

} // namespace headroom::sim
