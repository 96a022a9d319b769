// Issue 30: Qwen2.5-VL's vision side as Transformers 5.17 runs it (models/qwen2_5_vl/
// modeling_qwen2_5_vl.py: Qwen2_5_VisionTransformerPretrainedModel.forward, Qwen2_5_VLModel.forward),
// frozen, in the order the H200/H100 allocator timelines of tests/data/h200/vl-2026-12-05 show it.
// See Note [Vision step] (docs/estimator.md).
#include "vision.h"

#include "headroom/error.h"

#include <algorithm>

namespace headroom::sim {


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

namespace {

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

// nn.LayerNorm over `rows` x `width` values without autograd: the output, and the mean and
// reciprocal deviation (fp32, one a row) that native_layer_norm returns and nothing keeps.
T layerNorm(Sim &S, int64_t rows, int64_t width, int elem)
{
    T out = S.make(rows * width * elem, elem);
    T mean = S.make(rows * 4, 4), rstd = S.make(rows * 4, 4);
    S.drop(mean);
    S.drop(rstd);
    return out;
}

} // namespace

bool qwen3(const ModelArch::VisionSide &v)
{
    return v.tower.kind == ModelArch::VisionSide::Tower::Kind::Qwen3;
}

namespace {

// The block's norm: Qwen2.5-VL's RMSNorm, Qwen3-VL's LayerNorm.
T blockNorm(Sim &S, const ModelArch::VisionSide &v, int64_t rows, int elem)
{
    return qwen3(v) ? layerNorm(S, rows, v.tower.hidden, elem) : rmsNorm(S, rows, v.tower.hidden, elem);
}

// One vision block without autograd over `x` [N, H] (Qwen2_5_VLVisionBlock, Qwen3VLVisionBlock);
// `chunks` the attention's (windows, or whole frames in the full-attention blocks).
T block(Sim &S, const ModelArch::VisionSide &v, const T &x, const std::vector<int64_t> &chunks, int elem)
{
    const auto &t = v.tower;
    const int64_t H = t.hidden, N = x.bytes / (H * elem);
    S.setOp("visual.norm1");
    T n1 = blockNorm(S, v, N, elem);
    S.setOp("visual.attn");
    T qkv = S.make(N * 3 * H * elem, elem);
    // the step's first matmuls: cuBLAS takes its workspace, and cuBLASLt's for the biased addmm
    S.blasWorkspace(0);
    S.blasLtWorkspace();
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
    T n2 = blockNorm(S, v, N, elem);
    S.setOp("visual.mlp");
    const int64_t I = t.inter;
    T down;
    if (qwen3(v)) { // linear_fc2(act_fn(linear_fc1(x)))
        T fc1 = S.make(N * I * elem, elem);
        T act = S.make(fc1.bytes, elem);
        S.drop(fc1);
        down = S.make(N * H * elem, elem);
        S.drop(act);
    } else { // down_proj(act_fn(gate_proj(x)) * up_proj(x))
        T gate = S.make(N * I * elem, elem);
        T act = S.make(gate.bytes, elem);
        S.drop(gate);
        T up = S.make(gate.bytes, elem);
        T prod = S.make(gate.bytes, elem);
        S.drop(act);
        S.drop(up);
        down = S.make(N * H * elem, elem);
        S.drop(prod);
    }
    S.drop(n2);
    T h2 = S.make(N * H * elem, elem);
    S.drop(down);
    S.drop(h1);
    return h2;
}

} // namespace

// The tower's 2-D rotary (Qwen2_5_VLVisionRotaryEmbedding, Qwen3VLVisionRotaryEmbedding) over N
// patches of head size hd: positions as fp32, the (N, 2, hd / 4) frequencies, cos and sin (each
// times attention_scaling), each recomposed into [h | w | h | w] (N, hd) fp32: {cos, sin}.
std::array<T, 2> rotaryTables(Sim &S, int64_t N, int64_t hd)
{
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
    return tables;
}

std::array<T, 2> windowedRotaryTables(Sim &S, int64_t N, int64_t hd, int64_t merged)
{
    std::array<T, 2> tables = rotaryTables(S, N, hd);
    std::array<T, 2> permuted;
    for (int i = 0; i < 2; ++i) { // the window index as int64, then the rows gathered
        T idx = S.make(merged * 8, 8);
        permuted[static_cast<size_t>(i)] = S.make(N * hd * 4, 4);
        S.drop(idx);
    }
    for (T &table : tables)
        S.drop(table);
    return permuted;
}

std::vector<int64_t> frameChunks(const TowerCall &call)
{
    return std::vector<int64_t>(static_cast<size_t>(call.blocks * call.grid[0]), call.grid[1] * call.grid[2]);
}

void attentionChunks(const ModelArch::VisionSide &v, const TowerCall &call, std::vector<int64_t> &windows,
                     std::vector<int64_t> &frames)
{
    for (int64_t b = 0; b < call.blocks; ++b)
        for (int64_t f = 0; f < call.grid[0]; ++f)
            windowChunks(v, call.grid[1], call.grid[2], windows);
    frames = frameChunks(call);
}

void splitSizes(Sim &S, const TowerCall &call)
{
    S.setOp("visual.split");
    T sizes = S.make(call.blocks * 8, 8), sizes2 = S.make(call.blocks * 8, 8);
    S.drop(sizes);
    S.drop(sizes2);
}

namespace {

// A patch merger over N patches without autograd: its norm (over the patches, or after the
// shuffle over the merged rows: `postShuffle`), Linear(M, M), GELU, Linear(M, out).
T merger(Sim &S, const ModelArch::VisionSide &v, int64_t N, bool postShuffle, int elem)
{
    const auto &t = v.tower;
    const int64_t unit = v.merge * v.merge, merged = N / unit, M = t.hidden * unit;
    T norm = !qwen3(v)   ? rmsNorm(S, N, t.hidden, elem)
             : postShuffle ? layerNorm(S, merged, M, elem)
                           : layerNorm(S, N, t.hidden, elem);
    T l1 = S.make(merged * M * elem, elem);
    T gelu = S.make(l1.bytes, elem);
    S.drop(l1);
    T l2 = S.make(merged * t.outHidden * elem, elem);
    S.drop(gelu);
    S.drop(norm);
    return l2;
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
    // then gathered into window order
    std::array<T, 2> permuted = windowedRotaryTables(S, N, hd, merged);
    // the chunks: windows (per frame, in order) and whole frames
    std::vector<int64_t> windows, frames;
    attentionChunks(v, call, windows, frames);
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
    T l2 = merger(S, v, N, false, elem);
    T reverse = S.make(merged * 8, 8);
    T ordered = S.make(l2.bytes, elem);
    S.drop(reverse);
    S.drop(l2);
    // the tower returns: its locals go, then get_image_features' split sizes, the cast pixels and
    // the output object's last_hidden_state
    S.drop(positions);
    for (T &p : permuted)
        S.drop(p);
    splitSizes(S, call);
    S.drop(pixels);
    S.drop(hidden);
    // Qwen2_5_VLModel.forward: torch.cat of the per-image features (a copy), the split's base gone
    S.setOp("visual.features");
    T features = S.make(ordered.bytes, elem);
    S.drop(ordered);
    return features;
}

TowerOutput qwen3Tower(Sim &S, const ModelArch::VisionSide &v, const TowerCall &call, int elem)
{
    const auto &t = v.tower;
    const int64_t N = call.patches(), H = t.hidden, unit = v.merge * v.merge;
    if (N <= 0 || N % unit != 0)
        throw InputError("vision", std::to_string(N), "patches do not merge into whole tokens");
    S.setOp("visual.inputs");
    T pixels = S.make(N * t.inputWidth * elem, elem); // pixel_values.type(self.visual.dtype)
    // get_vision_interpolation_indices_and_weights: each patch's four neighbours in the learned
    // grid (int64) and their bilinear weights (fp32); get_vision_position_ids' (N, 2) int64 rows.
    // All three are kept to the end of forward (their helpers, a few KB, are left out).
    T taps = S.make(N * 4 * 8, 8), weights = S.make(N * 4 * 4, 4);
    T positions = S.make(N * 2 * 8, 8);
    S.setOp("visual.patch_embed");
    T conv = S.make(N * H * elem, elem);
    // (pos_embed(taps) * weights[:, :, None]).sum(1): the rows, their fp32 product (the weights
    // are fp32), the fp32 sum (pos_embeds, a local to the end of forward), cast and added
    S.setOp("visual.pos_embed");
    T rows = S.make(N * 4 * H * elem, elem);
    T weighted = S.make(N * 4 * H * 4, 4);
    S.drop(rows);
    T posEmbeds = S.make(N * H * 4, 4);
    S.drop(weighted);
    T cast = S.make(N * H * elem, elem);
    T hidden = S.make(N * H * elem, elem);
    S.drop(cast);
    S.drop(conv);
    std::array<T, 2> tables = rotaryTables(S, N, H / t.heads);
    const std::vector<int64_t> frames = frameChunks(call); // get_vision_attention_seqlens: each frame whole
    TowerOutput out;
    for (int64_t l = 0; l < t.depth; ++l) {
        S.setLayer(-1);
        T next = block(S, v, hidden, frames, elem);
        S.drop(hidden);
        hidden = next;
        if (std::find(t.deepstack.begin(), t.deepstack.end(), l) != t.deepstack.end()) {
            S.setOp("visual.deepstack_merger");
            out.deepstack.push_back(merger(S, v, N, true, elem));
        }
    }
    S.setOp("visual.merger");
    T merged = merger(S, v, N, false, elem);
    // the tower returns: its locals go (the tables last, sin first); last_hidden_state and the
    // merger's output stay in the output object
    for (T *x : {&taps, &weights, &positions, &posEmbeds, &tables[1], &tables[0]})
        S.drop(*x);
    splitSizes(S, call);
    S.drop(pixels);
    S.setOp("visual.features");
    out.features = S.make(merged.bytes, elem); // torch.cat of the split
    out.locals = {hidden, merged};
    return out;
}

T deepstackAdd(Sim &S, const T &h, const T &mask, const T &visual)
{
    S.setOp("deepstack");
    const int64_t rows = visual.bytes / visual.elem / (h.bytes / h.elem / (mask.bytes / mask.elem));
    const int64_t hBytes = h.bytes, vBytes = visual.bytes;
    // A boolean mask's index is its nonzero(): (rows, 2) int64, made and freed in each op
    const int64_t nz = rows * 2 * 8;
    // hidden_states.clone(): CloneBackward0 hands the gradient on
    T c = S.make(hBytes, h.elem);
    S.record({&c}, {&h}, {}, [](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        return std::vector<int>{needs[0] && g[0] >= 0 ? pass(s, g[0]) : -1};
    });
    // hidden_states[mask] + visual: the gathered rows go once added. IndexBackward0 keeps the
    // mask (the index as passed); its backward is index_put_ with accumulate into zeros of the
    // hidden states, which sorts the index (Ops::gather's)
    T idx = S.make(nz, 8);
    T rowsOut = S.make(vBytes, h.elem);
    S.drop(idx);
    T local = S.make(vBytes, h.elem);
    S.drop(rowsOut);
    // (AddBackward0 hands the same gradient to the visual features where they train: Qwen3-VL's
    // trained deepstack mergers)
    S.record({&local}, {&c, &visual}, {mask.sto}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        std::vector<int> r(2, -1);
        if (g[0] < 0)
            return r;
        if (needs[1])
            r[1] = pass(s, g[0]);
        if (!needs[0])
            return r;
        const int z = s.allocate(hBytes, Category::Temporaries);
        const int n = s.allocate(nz, Category::Temporaries);
        for (int k = 0; k < 2; ++k) { // the sort's keys and permutation, twice
            const int a = s.allocate(nz / 2, Category::Temporaries), b = s.allocate(nz / 2, Category::Temporaries);
            s.unref(a);
            s.unref(b);
        }
        s.unref(n);
        r[0] = z;
        return r;
    });
    // hidden_states[mask] = local: index_put_ on the clone. IndexPutBackward0 keeps the mask; its
    // backward makes the clone's gradient (grad.index_put(mask, zeros_like(local))) and local's
    // (grad[mask])
    T idx2 = S.make(nz, 8);
    S.drop(idx2);
    T out = S.detachedView(c);
    if (S.record({&out}, {&c, &local}, {mask.sto}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
            std::vector<int> r(2, -1);
            if (g[0] < 0)
                return r;
            if (needs[0]) {
                const int zeros = s.allocate(vBytes, Category::Temporaries);
                r[0] = s.allocate(hBytes, Category::Temporaries);
                s.unref(s.allocate(nz, Category::Temporaries));
                s.unref(zeros);
            }
            if (needs[1]) {
                const int n = s.allocate(nz, Category::Temporaries);
                r[1] = s.allocate(vBytes, Category::Temporaries);
                s.unref(n);
            }
            return r;
        }) < 0) {
        out.node = c.node;
        out.out = c.out;
        out.requiresGrad = c.requiresGrad && S.gradEnabled();
    }
    S.drop(c);
    S.drop(local);
    return out;
}

std::vector<T> placeholderMasks(Sim &S, int64_t tokens, int kinds)
{
    S.setOp("placeholder_mask");
    std::vector<T> masks; // input_ids == image_token_id (, video_token_id)
    for (int k = 0; k < kinds; ++k)
        masks.push_back(S.make(tokens, 1));
    // the checks: the count, the comparison with the features' size, torch_compilable_check
    T count = S.make(8, 8);
    T wide = S.make(tokens * 8, 8);
    S.drop(wide);
    T product = S.make(8, 8), equal = S.make(1, 1);
    S.drop(product);
    T check = S.make(1, 1);
    S.drop(check);
    S.drop(equal);
    if (kinds > 1) {
        T count2 = S.make(8, 8);
        T wide2 = S.make(tokens * 8, 8);
        S.drop(wide2);
        S.drop(count2);
    }
    S.drop(count);
    return masks;
}

std::vector<T> towerWeights(Sim &S, const ModelArch::VisionSide &v, int64_t textHidden, int elem, bool trainTower,
                            bool trainProjector)
{
    using Kind = ModelArch::VisionSide::Tower::Kind;
    const auto &t = v.tower;
    const int64_t H = t.hidden, I = t.inter, M = checkedMul(H, v.merge * v.merge);
    std::vector<T> out;
    int64_t count = 0;
    bool trains = trainTower; // the tower's parameters come first, then the projector's
    const auto weight = [&](int64_t n) {
        out.push_back(S.parameter(checkedMul(n, elem), elem, trains));
        count += n;
    };
    const auto weights = [&](std::initializer_list<int64_t> ns) {
        for (int64_t n : ns)
            weight(n);
    };
    S.setOp("visual");
    if (t.kind == Kind::Siglip) {
        // SiglipVisionEmbeddings: the patch Conv2d (biased), position_embedding, the position_ids
        // buffer (int64); each SiglipEncoderLayer: layer_norm1, k, v, q, out_proj, layer_norm2, fc1,
        // fc2 (all biased); post_layernorm. Gemma3MultiModalProjector: the projection matrix, then
        // mm_soft_emb_norm's weight.
        const int64_t P = (v.imageSize / v.patch) * (v.imageSize / v.patch);
        weights({checkedMul(H, t.inputWidth * v.patch * v.patch), H, checkedMul(P, H)});
        out.push_back(S.make(P * 8, 8, Category::Weights));
        for (int64_t l = 0; l < t.depth; ++l)
            weights({H, H, H * H, H, H * H, H, H * H, H, H * H, H, H, H, checkedMul(I, H), I, checkedMul(H, I), H});
        weights({H, H});
        trains = trainProjector;
        weights({checkedMul(H, textHidden), H});
    } else if (t.kind == Kind::Clip) {
        // CLIPVisionEmbeddings: class_embedding, the patch Conv2d (no bias), position_embedding,
        // the position_ids buffer; pre_layrnorm; each CLIPEncoderLayer: k, v, q, out_proj,
        // layer_norm1, fc1, fc2, layer_norm2; post_layernorm. LlavaMultiModalProjector: linear_1
        // (over the selected layers side by side), linear_2.
        const int64_t P = (v.imageSize / v.patch) * (v.imageSize / v.patch) + 1;
        weights({H, checkedMul(H, t.inputWidth * v.patch * v.patch), checkedMul(P, H)});
        out.push_back(S.make(P * 8, 8, Category::Weights));
        weights({H, H});
        for (int64_t l = 0; l < t.depth; ++l)
            weights({H * H, H, H * H, H, H * H, H, H * H, H, H, H, checkedMul(I, H), I, checkedMul(H, I), H, H, H});
        weights({H, H});
        trains = trainProjector;
        const int64_t in = checkedMul(H, static_cast<int64_t>(t.featureLayers.size()));
        weight(checkedMul(in, textHidden));
        if (t.projectorBias)
            weight(textHidden);
        weight(checkedMul(textHidden, textHidden));
        if (t.projectorBias)
            weight(textHidden);
    } else {
        const bool q3 = t.kind == Kind::Qwen3;
        weight(checkedMul(H, t.inputWidth));
        if (q3) // the Conv3d's bias, then pos_embed
            weights({H, checkedMul(t.positionEmbeddings, H)});
        for (int k = 0; k < 2; ++k) // inv_freq and original_inv_freq: (head_dim / 2) / 2 floats
            out.push_back(S.make(H / t.heads / 4 * 4, 4, Category::Weights));
        for (int64_t l = 0; l < t.depth; ++l) {
            if (q3) // LayerNorms (weight and bias), qkv, proj, linear_fc1, linear_fc2
                weights({H, H, H, H, checkedMul(3 * H, H), 3 * H, checkedMul(H, H), H, checkedMul(I, H), I,
                         checkedMul(H, I), H});
            else // RMSNorms, qkv, proj, the SwiGLU MLP
                weights({H, H, checkedMul(3 * H, H), 3 * H, checkedMul(H, H), H, checkedMul(I, H), I, checkedMul(I, H),
                         I, checkedMul(H, I), H});
        }
        // the merger (Qwen3-VL's LayerNorm has a bias), then Qwen3-VL's deepstack mergers (normed
        // after the shuffle, M wide)
        trains = trainProjector;
        weights({H, checkedMul(M, M), M, checkedMul(t.outHidden, M), t.outHidden});
        if (q3) {
            weight(H);
            for (size_t d = 0; d < t.deepstack.size(); ++d)
                weights({M, M, checkedMul(M, M), M, checkedMul(t.outHidden, M), t.outHidden});
        }
    }
    if (count != checkedAdd(v.towerParams, v.projectorParams))
        throw std::logic_error("vision tower: built " + std::to_string(count) + " parameters, the reader counts " +
                               std::to_string(v.towerParams + v.projectorParams));
    return out;
}

T maskedScatter(Sim &S, const T &embeds, const T &mask, const T *source)
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
    const bool sourceGrad = source && source->requiresGrad;
    if (!S.gradEnabled() || (!embeds.requiresGrad && !sourceGrad))
        return out;
    const int64_t bytes = embeds.bytes, values = source ? source->bytes : 0;
    const int64_t elements = source ? source->numel() : 0;
    // MaskedScatterBackward0: self's gradient is grad.masked_fill(mask, 0); the source's,
    // grad.masked_select(mask): the expanded mask made dense (a byte an element), its nonzero()
    // ((elements, 3) int64), the selected values (H100: 62,914,560 bytes of index for 1,024 image
    // tokens of 2,560)
    std::vector<const T *> inputs{&embeds};
    if (source)
        inputs.push_back(source);
    S.record({&out}, inputs, {mask.sto}, [=](Sim &s, const std::vector<int> &g, const std::vector<bool> &needs) {
        std::vector<int> r(needs.size(), -1);
        if (g[0] < 0)
            return r;
        if (needs[0])
            r[0] = s.allocate(bytes, Category::Temporaries);
        if (needs.size() > 1 && needs[1]) {
            const int dense = s.allocate(n, Category::Temporaries);
            const int index = s.allocate(elements * 3 * 8, Category::Temporaries);
            s.unref(dense);
            r[1] = s.allocate(values, Category::Temporaries);
            s.unref(index);
        }
        return r;
    });
    return out;
}

} // namespace headroom::sim
