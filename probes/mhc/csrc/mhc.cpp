// CPU reference kernels for the four mHC operators of Huawei CANN ops-transformer:
//   mhc_pre_sinkhorn, mhc_pre_sinkhorn_backward, mhc_post, mhc_post_backward.
//
// Written from ../../../docs/mhc.md and the operator specification (sections quoted as "spec §N").
// Everything is computed with ATen calls in float32; only the outputs that the spec gives x's dtype
// (h_in, y, grad_x, grad_h_out) are cast back, with round-to-nearest-even (at::Tensor::to).
//
// This file is a plain pybind11 module: it does NOT register dispatcher operators. The Python
// package (mhc/ops.py) defines `cann_ops_transformer::*` with torch.library and calls these
// functions from its CPU kernels, which is the same layering as the CANN torch extension.
//
// Shapes use named dims: B, S batch and sequence (or one token dim T), n = hcMult streams,
// C = hidden size, K = n*C, M = n*n + 2n, I = numIters. "lead" stands for (B, S) or (T,).

#include <torch/extension.h>

#include <tuple>
#include <vector>

namespace {

using at::Tensor;

// x: (*lead, n, C) -> the leading sizes.
std::vector<int64_t> lead_sizes(const Tensor& x) {
  return std::vector<int64_t>(x.sizes().begin(), x.sizes().end() - 2);
}

std::vector<int64_t> with_tail(std::vector<int64_t> sizes, std::initializer_list<int64_t> tail) {
  sizes.insert(sizes.end(), tail.begin(), tail.end());
  return sizes;
}

std::vector<int64_t> with_head(int64_t head, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out{head};
  out.insert(out.end(), sizes.begin(), sizes.end());
  return out;
}

// Contiguous float32 copy (or the tensor itself when it already is one). Every kernel input goes
// through this, so results do not depend on input strides: autograd hands expanded (stride-0)
// gradients in eager mode where a compiled graph hands contiguous ones, and BLAS sums in a different
// order for the two, which at C=4096 shows up as 1e-4-level float32 differences.
Tensor f32(const Tensor& t) { return t.to(at::kFloat).contiguous(); }

void check_x_dtype(const Tensor& x, const char* name) {
  const auto dt = x.scalar_type();
  TORCH_CHECK(dt == at::kBFloat16 || dt == at::kHalf || dt == at::kFloat,
              name, " must be bfloat16, float16 or float32, got ", dt);
}

void check_fp32(const Tensor& t, const char* name) {
  TORCH_CHECK(t.scalar_type() == at::kFloat, name, " must be float32, got ", t.scalar_type());
}

// Shared argument checks of mhc_pre_sinkhorn and its backward (spec §4.1).
void check_pre_args(const Tensor& x, const Tensor& phi, const Tensor& alpha, const Tensor& bias,
                    int64_t n) {
  TORCH_CHECK(x.dim() == 3 || x.dim() == 4,
              "mhc_pre_sinkhorn: x must be (B, S, n, C) or (T, n, C), got ", x.sizes());
  check_x_dtype(x, "mhc_pre_sinkhorn: x");
  TORCH_CHECK(x.size(-2) == n, "mhc_pre_sinkhorn: hcMult (", n, ") must equal x.size(-2) (",
              x.size(-2), ")");
  const int64_t C = x.size(-1);
  const int64_t M = n * n + 2 * n;
  TORCH_CHECK(phi.dim() == 2 && phi.size(0) == M && phi.size(1) == n * C,
              "mhc_pre_sinkhorn: phi must be (n*n+2n, n*C) = (", M, ", ", n * C, "), got ",
              phi.sizes());
  TORCH_CHECK(alpha.dim() == 1 && alpha.size(0) == 3, "mhc_pre_sinkhorn: alpha must be (3,), got ",
              alpha.sizes());
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == M, "mhc_pre_sinkhorn: bias must be (", M,
              ",), got ", bias.sizes());
  check_fp32(phi, "mhc_pre_sinkhorn: phi");
  check_fp32(alpha, "mhc_pre_sinkhorn: alpha");
  check_fp32(bias, "mhc_pre_sinkhorn: bias");
}

}  // namespace

// spec §4: returns the 8-tuple
//   (h_in (*lead, C) x.dtype, h_post (*lead, n), h_res (*lead, n*n), h_pre (*lead, n),
//    hc_before_norm (*lead, M), inv_rms (*lead, 1), sum_out (2I, *lead, n), norm_out (2I, *lead, n, n));
// outputs 1..7 are float32. With out_flag=false outputs 3..7 are empty float32 tensors of shape (0,).
std::tuple<Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor> mhc_pre_sinkhorn(
    const Tensor& x, const Tensor& phi, const Tensor& alpha, const Tensor& bias, int64_t hc_mult,
    int64_t num_iters, double hc_eps, double norm_eps, bool out_flag) {
  const at::NoGradGuard no_grad;  // a kernel: never record autograd history, whatever the caller
  const int64_t n = hc_mult;
  check_pre_args(x, phi, alpha, bias, n);
  TORCH_CHECK(num_iters >= 1, "mhc_pre_sinkhorn: numIters must be >= 1, got ", num_iters);
  const int64_t C = x.size(-1);
  const int64_t K = n * C;
  const auto lead = lead_sizes(x);
  const int64_t T = x.numel() / K;

  // spec §4.3 steps 1-4: exact upcast, inv_rms = 1/sqrt(mean(x^2) + normEps), hbn = x_flat @ phi^T.
  const Tensor xf = f32(x).reshape({T, n, C});
  const Tensor xk = xf.reshape({T, K});
  const Tensor inv_rms = at::reciprocal(at::sqrt(xk.square().mean({-1}, true) + norm_eps));  // (T,1)
  const Tensor hbn = at::matmul(xk, f32(phi).t());                                                 // (T,M)
  const Tensor mix = hbn * inv_rms;

  // step 5: logits, order mix * alpha + bias.
  const Tensor z_pre = mix.narrow(-1, 0, n) * alpha[0] + bias.narrow(0, 0, n);
  const Tensor z_post = mix.narrow(-1, n, n) * alpha[1] + bias.narrow(0, n, n);
  const Tensor z_res =
      (mix.narrow(-1, 2 * n, n * n) * alpha[2] + bias.narrow(0, 2 * n, n * n)).reshape({T, n, n});

  // step 6-7: gates and h_in.
  const Tensor h_pre = at::sigmoid(z_pre) + hc_eps;  // eps included (stored with it)
  const Tensor h_post = at::sigmoid(z_post) * 2.0;
  const Tensor h_in = (h_pre.unsqueeze(-1) * xf).sum(1).to(x.scalar_type());  // (T,C)

  // step 8: Sinkhorn (spec §4.3/§4.4). Slot 0 stores the raw softmax denominator, every later slot
  // stores the divisor actually used (sum + eps) [INFER in the spec, chosen in docs/mhc.md].
  std::vector<Tensor> sums;
  std::vector<Tensor> norms;
  sums.reserve(2 * num_iters);
  norms.reserve(2 * num_iters);
  const Tensor e = at::exp(z_res - std::get<0>(z_res.max(-1, true)));
  const Tensor s0 = e.sum(-1);                       // (T,n) indexed by row j
  Tensor p = e / s0.unsqueeze(-1) + hc_eps;          // P_0
  sums.push_back(s0);
  norms.push_back(p);
  Tensor s = p.sum(-2) + hc_eps;                     // (T,n) indexed by column k
  p = p / s.unsqueeze(-2);                           // P_1
  sums.push_back(s);
  norms.push_back(p);
  for (int64_t i = 1; i < num_iters; ++i) {
    s = p.sum(-1) + hc_eps;  // row step, slot 2i
    p = p / s.unsqueeze(-1);
    sums.push_back(s);
    norms.push_back(p);
    s = p.sum(-2) + hc_eps;  // column step, slot 2i+1
    p = p / s.unsqueeze(-2);
    sums.push_back(s);
    norms.push_back(p);
  }

  Tensor out_h_in = h_in.reshape(with_tail(lead, {C}));
  Tensor out_h_post = h_post.reshape(with_tail(lead, {n}));
  Tensor out_h_res = p.reshape(with_tail(lead, {n * n}));
  if (!out_flag) {
    auto empty = [&]() { return at::empty({0}, phi.options()); };
    return {out_h_in, out_h_post, out_h_res, empty(), empty(), empty(), empty(), empty()};
  }
  const int64_t slots = 2 * num_iters;
  return {out_h_in,
          out_h_post,
          out_h_res,
          h_pre.reshape(with_tail(lead, {n})),
          hbn.reshape(with_tail(lead, {n * n + 2 * n})),
          inv_rms.reshape(with_tail(lead, {1})),
          at::stack(sums, 0).reshape(with_head(slots, with_tail(lead, {n}))),
          at::stack(norms, 0).reshape(with_head(slots, with_tail(lead, {n, n})))};
}

// spec §6.2 steps 1-9 (exact Sinkhorn derivative for the §4.4 storage convention).
// Returns (grad_x like x, grad_phi (M, K) f32, grad_alpha (3,) f32, grad_bias (M,) f32).
std::tuple<Tensor, Tensor, Tensor, Tensor> mhc_pre_sinkhorn_backward(
    const Tensor& grad_h_in, const Tensor& grad_h_post, const Tensor& grad_h_res, const Tensor& x,
    const Tensor& phi, const Tensor& alpha, const Tensor& bias, const Tensor& h_pre,
    const Tensor& hc_before_norm, const Tensor& inv_rms, const Tensor& sum_out,
    const Tensor& norm_out, double hc_eps) {
  const at::NoGradGuard no_grad;
  TORCH_CHECK(x.dim() == 3 || x.dim() == 4,
              "mhc_pre_sinkhorn_backward: x must be (B, S, n, C) or (T, n, C), got ", x.sizes());
  const int64_t n = x.size(-2);
  check_pre_args(x, phi, alpha, bias, n);
  const int64_t C = x.size(-1);
  const int64_t K = n * C;
  const int64_t M = n * n + 2 * n;
  const int64_t T = x.numel() / K;
  TORCH_CHECK(h_pre.numel() == T * n && hc_before_norm.numel() == T * M && inv_rms.numel() == T,
              "mhc_pre_sinkhorn_backward: hPre/hcBeforeNorm/invRms do not match x; they must be "
              "outputs 3-5 of mhc_pre_sinkhorn called with outFlag=True");
  TORCH_CHECK(sum_out.dim() >= 1 && sum_out.size(0) >= 2 && sum_out.size(0) % 2 == 0 &&
                  sum_out.numel() == sum_out.size(0) * T * n &&
                  norm_out.numel() == sum_out.size(0) * T * n * n,
              "mhc_pre_sinkhorn_backward: sumOut must be (2I, *lead, n) and normOut (2I, *lead, n, "
              "n); got ", sum_out.sizes(), " and ", norm_out.sizes());
  TORCH_CHECK(grad_h_in.numel() == T * C && grad_h_post.numel() == T * n &&
                  grad_h_res.numel() == T * n * n,
              "mhc_pre_sinkhorn_backward: gradHin/gradHPost/gradHRes must be (*lead, C), (*lead, n) "
              "and (*lead, n*n) or (*lead, n, n)");
  const int64_t slots = sum_out.size(0);

  // step 1: recompute.
  const Tensor xf = f32(x).reshape({T, n, C});
  const Tensor xk = xf.reshape({T, K});
  const Tensor r = f32(inv_rms).reshape({T, 1});
  const Tensor hbn = f32(hc_before_norm).reshape({T, M});
  const Tensor mix = hbn * r;
  const Tensor hp = f32(h_pre).reshape({T, n});
  const Tensor z_post = mix.narrow(-1, n, n) * alpha[1] + bias.narrow(0, n, n);
  const Tensor gh_in = f32(grad_h_in).reshape({T, 1, C});

  // step 2: h_in branch.
  const Tensor gx_a = gh_in * hp.unsqueeze(-1);  // (T,n,C)
  const Tensor g_hpre = (gh_in * xf).sum(-1);     // (T,n)
  // step 3: pre sigmoid, s = hPre - eps.
  const Tensor sp = hp - hc_eps;
  const Tensor g_zpre = g_hpre * sp * (1.0 - sp);
  // step 4: post sigmoid.
  const Tensor sq = at::sigmoid(z_post);
  const Tensor g_zpost = f32(grad_h_post).reshape({T, n}) * 2.0 * sq * (1.0 - sq);
  // step 5: Sinkhorn backward, slots 2I-1 .. 1, then the softmax step on slot 0.
  const Tensor S = f32(sum_out).reshape({slots, T, n});
  const Tensor P = f32(norm_out).reshape({slots, T, n, n});
  Tensor G = f32(grad_h_res).reshape({T, n, n});
  for (int64_t t = slots - 1; t >= 1; --t) {
    const Tensor Pt = P[t];
    const Tensor St = S[t];
    if (t % 2 == 1) {  // column step: divisor indexed by column k
      G = (G - (G * Pt).sum(-2, true)) / St.unsqueeze(-2);
    } else {  // row step: divisor indexed by row j
      G = (G - (G * Pt).sum(-1, true)) / St.unsqueeze(-1);
    }
  }
  const Tensor p0 = P[0] - hc_eps;
  const Tensor g_zres = p0 * (G - (G * p0).sum(-1, true));  // (T,n,n)

  // step 6: affine and gate parameters.
  const Tensor g_zres_flat = g_zres.reshape({T, n * n});
  const Tensor g_z = at::cat({g_zpre, g_zpost, g_zres_flat}, -1);  // (T,M)
  const Tensor grad_bias = g_z.sum(0);
  const Tensor grad_alpha = at::stack({(mix.narrow(-1, 0, n) * g_zpre).sum(),
                                       (mix.narrow(-1, n, n) * g_zpost).sum(),
                                       (mix.narrow(-1, 2 * n, n * n) * g_zres_flat).sum()});
  const Tensor alpha_exp = at::cat({alpha[0].expand({n}), alpha[1].expand({n}),
                                    alpha[2].expand({n * n})});
  const Tensor g_mix = g_z * alpha_exp;
  // step 7: normalization.
  const Tensor g_hbn = g_mix * r;
  const Tensor g_r = (g_mix * hbn).sum(-1, true);  // (T,1)
  const Tensor gx_b = -g_r * r.pow(3) * xk / static_cast<double>(K);
  // step 8: matmul.
  const Tensor gx_c = at::matmul(g_hbn, f32(phi));  // (T,K)
  const Tensor grad_phi = at::matmul(g_hbn.t(), xk);  // (M,K)
  // step 9.
  const Tensor grad_x =
      (gx_a + (gx_b + gx_c).reshape({T, n, C})).reshape(x.sizes()).to(x.scalar_type());
  return {grad_x, grad_phi, grad_alpha, grad_bias};
}

namespace {

void check_post_args(const Tensor& x, const Tensor& h_res, const Tensor& h_out,
                     const Tensor& h_post, const char* op) {
  TORCH_CHECK(x.dim() == 3 || x.dim() == 4, op, ": x must be (B, S, n, D) or (T, n, D), got ",
              x.sizes());
  check_x_dtype(x, op);
  const auto lead = lead_sizes(x);
  const int64_t n = x.size(-2);
  const int64_t D = x.size(-1);
  TORCH_CHECK(h_res.sizes() == at::IntArrayRef(with_tail(lead, {n, n})), op,
              ": hRes must be (*lead, n, n) = ", at::IntArrayRef(with_tail(lead, {n, n})), ", got ",
              h_res.sizes());
  TORCH_CHECK(h_out.sizes() == at::IntArrayRef(with_tail(lead, {D})), op,
              ": hOut must be (*lead, D), got ", h_out.sizes());
  TORCH_CHECK(h_post.sizes() == at::IntArrayRef(with_tail(lead, {n})), op,
              ": hPost must be (*lead, n), got ", h_post.sizes());
  TORCH_CHECK(h_out.scalar_type() == x.scalar_type(), op, ": hOut must have x's dtype (",
              x.scalar_type(), "), got ", h_out.scalar_type());
  check_fp32(h_res, "hRes");
  check_fp32(h_post, "hPost");
}

}  // namespace

// spec §7: y[..., k, :] = hPost[k] * hOut + sum_j hRes[j, k] * x[j]; y like x.
Tensor mhc_post(const Tensor& x, const Tensor& h_res, const Tensor& h_out, const Tensor& h_post) {
  const at::NoGradGuard no_grad;
  check_post_args(x, h_res, h_out, h_post, "mhc_post");
  const Tensor xf = f32(x);
  const Tensor y = f32(h_post).unsqueeze(-1) * f32(h_out).unsqueeze(-2) +
                   at::matmul(f32(h_res).transpose(-1, -2), xf);
  return y.to(x.scalar_type());
}

// spec §8: returns (grad_x like x, grad_h_res f32 like hRes, grad_h_out like hOut,
// grad_h_post f32 like hPost).
std::tuple<Tensor, Tensor, Tensor, Tensor> mhc_post_backward(const Tensor& grad_output,
                                                             const Tensor& x, const Tensor& h_res,
                                                             const Tensor& h_out,
                                                             const Tensor& h_post) {
  const at::NoGradGuard no_grad;
  check_post_args(x, h_res, h_out, h_post, "mhc_post_backward");
  TORCH_CHECK(grad_output.sizes() == x.sizes(),
              "mhc_post_backward: gradOutput must have x's shape ", x.sizes(), ", got ",
              grad_output.sizes());
  const Tensor g = f32(grad_output);
  const Tensor xf = f32(x);
  const Tensor grad_x = at::matmul(f32(h_res), g).to(x.scalar_type());
  const Tensor grad_h_res = at::matmul(xf, g.transpose(-1, -2));
  const Tensor grad_h_out =
      at::matmul(f32(h_post).unsqueeze(-2), g).squeeze(-2).to(h_out.scalar_type());
  const Tensor grad_h_post =
      at::matmul(g, f32(h_out).unsqueeze(-1)).squeeze(-1);
  return {grad_x, grad_h_res, grad_h_out, grad_h_post};
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "CPU reference kernels for the CANN mHC operators (see docs/mhc.md)";
  m.def("mhc_pre_sinkhorn", &mhc_pre_sinkhorn, "mHC pre + Sinkhorn forward (8-tuple)",
        py::arg("x"), py::arg("phi"), py::arg("alpha"), py::arg("bias"), py::arg("hcMult"),
        py::arg("numIters"), py::arg("hcEps"), py::arg("normEps"), py::arg("outFlag"));
  m.def("mhc_pre_sinkhorn_backward", &mhc_pre_sinkhorn_backward,
        "mHC pre + Sinkhorn backward -> (grad_x, grad_phi, grad_alpha, grad_bias)",
        py::arg("gradHin"), py::arg("gradHPost"), py::arg("gradHRes"), py::arg("x"),
        py::arg("phi"), py::arg("alpha"), py::arg("bias"), py::arg("hPre"),
        py::arg("hcBeforeNorm"), py::arg("invRms"), py::arg("sumOut"), py::arg("normOut"),
        py::arg("hcEps"));
  m.def("mhc_post", &mhc_post, "mHC post: y = hRes^T x + hPost (x) hOut", py::arg("x"),
        py::arg("hRes"), py::arg("hOut"), py::arg("hPost"));
  m.def("mhc_post_backward", &mhc_post_backward,
        "mHC post backward -> (grad_x, grad_h_res, grad_h_out, grad_h_post)",
        py::arg("gradOutput"), py::arg("x"), py::arg("hRes"), py::arg("hOut"), py::arg("hPost"));
}
