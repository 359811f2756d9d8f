// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "hybrid/decoder.hpp"

#include "hybrid/math.hpp"
#include "hybrid/weights.hpp"
#include "hybrid/recurrent.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <variant>

namespace reprise::example {
namespace {

/// Multi-head attention with grouped KV heads and rotary positions, reading KV through the block table.
class attention_mixer {
public:
  attention_mixer(const decoder_config& c, std::uint32_t ordinal, weight_source& w)
      : c_(c), ordinal_(ordinal), q_width_(std::size_t{c.query_heads} * c.attention.head_dim),
        kv_width_(std::size_t{c.attention.kv_heads} * c.attention.head_dim),
        w_qkv_(w.projection(c.d_model, q_width_ + 2 * kv_width_)), w_out_(w.projection(q_width_, c.d_model)) {}

  void forward(std::span<const float> x, std::span<float> y, std::span<const sequence_step> steps,
               kv_memory& kv) const {
    const std::size_t tokens = x.size() / c_.d_model;
    const std::size_t qkv_width = q_width_ + 2 * kv_width_;
    std::vector<float> qkv(tokens * qkv_width);
    math::linear(x.data(), tokens, c_.d_model, w_qkv_.data(), qkv_width, qkv.data());

    const std::uint32_t hd = c_.attention.head_dim, bs = c_.attention.block_size;
    // Rotary positions, then every new key and value goes to its block before any query of the call reads.
    std::size_t t = 0;
    for (const sequence_step& s : steps) {
      for (std::uint32_t i = 0; i < s.count; ++i, ++t) {
        const std::uint32_t pos = s.start + i;
        float* row = qkv.data() + t * qkv_width;
        for (std::uint32_t h = 0; h < c_.query_heads + c_.attention.kv_heads; ++h)
          math::rope(row + std::size_t{h} * hd, hd, pos, c_.rope_theta);
        if (pos < s.kv_write_from) continue; // already in a shared block, bitwise the same
        const std::uint32_t block = s.blocks[pos / bs];
        const std::size_t at = std::size_t{pos % bs} * kv_width_;
        std::memcpy(kv.keys(ordinal_, block) + at, row + q_width_, kv_width_ * sizeof(float));
        std::memcpy(kv.values(ordinal_, block) + at, row + q_width_ + kv_width_, kv_width_ * sizeof(float));
      }
    }

    std::vector<float> heads_out(tokens * q_width_), scores;
    const std::uint32_t group = c_.query_heads / c_.attention.kv_heads;
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    t = 0;
    for (const sequence_step& s : steps) {
      for (std::uint32_t i = 0; i < s.count; ++i, ++t) {
        const std::uint32_t pos = s.start + i;
        scores.resize(pos + 1);
        for (std::uint32_t h = 0; h < c_.query_heads; ++h) {
          const float* q = qkv.data() + t * qkv_width + std::size_t{h} * hd;
          const std::size_t kv_off = std::size_t{h / group} * hd;
          // Two passes over the context in position order: scores and their max, then the weighted sum.
          float top = -INFINITY;
          for (std::uint32_t j = 0; j <= pos; ++j) {
            const float* k = kv.keys(ordinal_, s.blocks[j / bs]) + std::size_t{j % bs} * kv_width_ + kv_off;
            scores[j] = math::dot(q, k, hd) * scale;
            top = std::max(top, scores[j]);
          }
          float* o = heads_out.data() + t * q_width_ + std::size_t{h} * hd;
          std::fill(o, o + hd, 0.0f);
          float sum = 0.0f;
          for (std::uint32_t j = 0; j <= pos; ++j) {
            const float p = std::exp(scores[j] - top);
            sum += p;
            const float* v = kv.values(ordinal_, s.blocks[j / bs]) + std::size_t{j % bs} * kv_width_ + kv_off;
            for (std::uint32_t d = 0; d < hd; ++d) o[d] += p * v[d];
          }
          const float inv = 1.0f / sum;
          for (std::uint32_t d = 0; d < hd; ++d) o[d] *= inv;
        }
      }
    }
    math::linear(heads_out.data(), tokens, q_width_, w_out_.data(), c_.d_model, y.data());
  }

private:
  const decoder_config& c_;
  std::uint32_t ordinal_;
  std::size_t q_width_, kv_width_;
  std::vector<float> w_qkv_, w_out_;
};

/// SwiGLU MLP: down(silu(gate(x)) * up(x)).
class mlp {
public:
  mlp(const decoder_config& c, weight_source& w)
      : c_(c), w_gate_up_(w.projection(c.d_model, 2 * std::size_t{c.mlp_hidden})),
        w_down_(w.projection(c.mlp_hidden, c.d_model)) {}

  void forward(std::span<const float> x, std::span<float> y) const {
    const std::size_t tokens = x.size() / c_.d_model, hidden = c_.mlp_hidden;
    std::vector<float> gu(tokens * 2 * hidden), h(tokens * hidden);
    math::linear(x.data(), tokens, c_.d_model, w_gate_up_.data(), 2 * hidden, gu.data());
    for (std::size_t t = 0; t < tokens; ++t)
      for (std::size_t i = 0; i < hidden; ++i)
        h[t * hidden + i] = math::silu(gu[t * 2 * hidden + i]) * gu[t * 2 * hidden + hidden + i];
    math::linear(h.data(), tokens, hidden, w_down_.data(), c_.d_model, y.data());
  }

private:
  const decoder_config& c_;
  std::vector<float> w_gate_up_, w_down_;
};

using mixer = std::variant<attention_mixer, mamba2_mixer, gated_delta_mixer>;

struct layer {
  std::vector<float> mixer_norm, mlp_norm;
  mixer mix;
  example::mlp ffn;
};

} // namespace

struct decoder::impl {
  decoder_config c;
  std::vector<float> embedding, final_norm, lm_head;
  std::vector<layer> layers;

  explicit impl(const decoder_config& cfg) : c(cfg) {
    weight_source w(c.seed);
    embedding = w.uniform(std::size_t{c.vocab} * c.d_model, 1.0f);
    std::uint32_t ordinal[3] = {0, 0, 0}; // per kind: the layer's index among layers of its kind
    for (char kind : c.pattern) {
      std::vector<float> n1 = w.range(c.d_model, 0.8f, 1.2f);
      mixer m = [&]() -> mixer {
        switch (static_cast<layer_kind>(kind)) {
        case layer_kind::attention: return attention_mixer(c, ordinal[0]++, w);
        case layer_kind::mamba2: return mamba2_mixer(c, ordinal[1]++, w);
        case layer_kind::gated_delta: return gated_delta_mixer(c, ordinal[2]++, w);
        }
        __builtin_unreachable();
      }();
      std::vector<float> n2 = w.range(c.d_model, 0.8f, 1.2f);
      layers.push_back(layer{std::move(n1), std::move(n2), std::move(m), example::mlp(c, w)});
    }
    final_norm = w.range(c.d_model, 0.8f, 1.2f);
    lm_head = w.projection(c.d_model, c.vocab);
  }
};

result<decoder> decoder::make(const decoder_config& c) {
  if (auto v = c.validate(); !v) return v.error();
  return decoder(std::make_unique<impl>(c));
}

decoder::decoder(std::unique_ptr<impl> p) : impl_(std::move(p)) {}
decoder::decoder(decoder&&) noexcept = default;
decoder& decoder::operator=(decoder&&) noexcept = default;
decoder::~decoder() = default;

const decoder_config& decoder::config() const noexcept { return impl_->c; }

void decoder::forward(pass p, std::span<const token> tokens, std::span<const sequence_step> steps, kv_memory& kv,
                      state_memory& states, std::span<float> logits) const {
  const decoder_config& c = impl_->c;
  const std::size_t n = tokens.size(), d = c.d_model;
  std::vector<float> x(n * d), normed(n * d), delta(n * d);
  for (std::size_t t = 0; t < n; ++t)
    std::memcpy(x.data() + t * d, impl_->embedding.data() + std::size_t(tokens[t]) * d, d * sizeof(float));

  for (const layer& l : impl_->layers) {
    math::rms_norm(x.data(), n, d, l.mixer_norm.data(), c.rms_eps, normed.data());
    std::visit(
        [&](const auto& m) {
          if constexpr (std::is_same_v<std::decay_t<decltype(m)>, attention_mixer>) m.forward(normed, delta, steps, kv);
          else m.forward(p, normed, delta, steps, states);
        },
        l.mix);
    for (std::size_t i = 0; i < n * d; ++i) x[i] += delta[i];
    math::rms_norm(x.data(), n, d, l.mlp_norm.data(), c.rms_eps, normed.data());
    l.ffn.forward(normed, delta);
    for (std::size_t i = 0; i < n * d; ++i) x[i] += delta[i];
  }

  // Logits of each step's last token only: prefill never needs the others.
  std::size_t last = 0;
  std::vector<float> h(d);
  for (std::size_t s = 0; s < steps.size(); ++s) {
    last += steps[s].count;
    math::rms_norm(x.data() + (last - 1) * d, 1, d, impl_->final_norm.data(), c.rms_eps, h.data());
    math::linear(h.data(), 1, d, impl_->lm_head.data(), c.vocab, logits.data() + s * c.vocab);
  }
}

} // namespace reprise::example
