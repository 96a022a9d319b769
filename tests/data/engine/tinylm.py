"""A small Llama-shaped causal LM in plain torch, for testing headroom_engine.py where
Hugging Face Transformers is not installed (CI has Debian's python3-torch only).

headroom-probe --engine transformers --model-factory tests/data/engine/tinylm.py builds the
request's model with build() below instead of AutoModelForCausalLM.from_config. It follows the
parts of HF's LlamaForCausalLM that decide memory: an embedding, RMSNorm in fp32, rotary
attention, a gated MLP, an lm_head and ForCausalLMLoss (logits upcast to fp32, labels shifted).
"""
import math

import torch
import torch.nn.functional as F
from torch import nn


class Config:
    def __init__(self, d):
        self.vocab_size = int(d["vocab_size"])
        self.hidden_size = int(d["hidden_size"])
        self.num_hidden_layers = int(d["num_hidden_layers"])
        self.num_attention_heads = int(d["num_attention_heads"])
        self.num_key_value_heads = int(d.get("num_key_value_heads", self.num_attention_heads))
        self.head_dim = int(d.get("head_dim") or self.hidden_size // self.num_attention_heads)
        self.intermediate_size = int(d["intermediate_size"])
        self.tie_word_embeddings = bool(d.get("tie_word_embeddings", False))
        self.rms_norm_eps = float(d.get("rms_norm_eps", 1e-5))
        self.model_type = d.get("model_type", "llama")


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.to(torch.float32)
        var = x.pow(2).mean(-1, keepdim=True)
        x = x * torch.rsqrt(var + self.eps)
        return self.weight * x.to(dtype)


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Attention(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.q_proj = nn.Linear(c.hidden_size, c.num_attention_heads * c.head_dim, bias=False)
        self.k_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.v_proj = nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.o_proj = nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=False)

    def forward(self, x, cos, sin):
        b, s, _ = x.shape
        c = self.c
        q = self.q_proj(x).view(b, s, -1, c.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, -1, c.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, -1, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = c.num_attention_heads // c.num_key_value_heads
        if rep > 1:
            k = k[:, :, None].expand(b, c.num_key_value_heads, rep, s, c.head_dim).reshape(b, -1, s, c.head_dim)
            v = v[:, :, None].expand(b, c.num_key_value_heads, rep, s, c.head_dim).reshape(b, -1, s, c.head_dim)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(c.head_dim)
        mask = torch.full((s, s), float("-inf"), device=x.device, dtype=scores.dtype).triu(1)
        probs = F.softmax(scores + mask, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(probs, v).transpose(1, 2).contiguous().view(b, s, -1)
        return self.o_proj(out)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class Output:
    def __init__(self, loss, logits):
        self.loss = loss
        self.logits = logits


class TinyCausalLM(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.embed_tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(c) for _ in range(c.num_hidden_layers)])
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.lm_head = nn.Linear(c.hidden_size, c.vocab_size, bias=False)
        if c.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.checkpointing = False

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs=None):
        self.checkpointing = True

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids, labels=None):
        b, s = input_ids.shape
        c = self.config
        x = self.embed_tokens(input_ids)
        inv = 1.0 / (10000 ** (torch.arange(0, c.head_dim, 2, device=x.device).float() / c.head_dim))
        freqs = torch.outer(torch.arange(s, device=x.device).float(), inv)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for layer in self.layers:
            if self.checkpointing and self.training:
                from torch.utils.checkpoint import checkpoint
                x = checkpoint(layer, x, cos, sin, use_reentrant=False)
            else:
                x = layer(x, cos, sin)
        logits = self.lm_head(self.norm(x))
        loss = None
        if labels is not None:
            # ForCausalLMLoss: upcast, pad the labels with ignore_index and shift them by one.
            flat = logits.float().view(-1, c.vocab_size)
            shifted = F.pad(labels, (0, 1), value=-100)[..., 1:].contiguous().view(-1)
            loss = F.cross_entropy(flat, shifted, ignore_index=-100)
        return Output(loss, logits)


def build(config, dtype, attn_implementation, device):
    """The engine's model factory entry point: an nn.Module whose forward(input_ids, labels)
    returns an object with .loss."""
    torch.manual_seed(0)
    model = TinyCausalLM(Config(config))
    return model.to(device=device, dtype=dtype)
