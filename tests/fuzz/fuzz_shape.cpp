// Fuzz target: the shape ops (xgrad/ops/shape.hpp): reshape, permute, transpose, slice,
// expand, concat, pad, slice_backward and cast, chained up to four deep on a small tensor, with
// attributes from fuzz_input's table (negative, 2^31, 2^40, INT64_MAX, INT64_MIN, ...), then
// backward through the chain when every tensor in it is small.
//
// Each op's result is predicted first with exact (128-bit) arithmetic, from the contract in
// shape.hpp:
//   - arguments the contract rejects (a second -1, an extent below -1, a shape or padding
//     whose element count overflows int64, step < 1, a repeated or out-of-range dim, ...) must
//     make the op throw std::invalid_argument, without allocating;
//   - a valid request whose result would copy more than fuzz::max_elements elements is skipped
//     (a large but legal allocation is not a finding); views of any size are made (expand
//     gives huge shapes with stride 0);
//   - otherwise the op must succeed with the predicted shape.
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "tests/fuzz/fuzz_input.hpp"
#include "xgrad/autograd.hpp"
#include "xgrad/ops/shape.hpp"

namespace
{
    using namespace xgrad;
    using fuzz::fuzz_input;
    constexpr const char* target = "shape";
    constexpr __int128 int64_max = std::numeric_limits<std::int64_t>::max();

    struct chain_state
    {
        tensor t;
        bool small = true; // every tensor so far has at most max_elements elements
    };

    std::string describe(const char* op, const tensor& t, const std::string& args)
    {
        return std::string(op) + "(" + fuzz::shape_string(t.shape()) + ", " + args + ")";
    }

    std::string list(const std::vector<std::int64_t>& v) { return shape_to_string(v); }

    /// The dim d normalised into [0, rank), or -1 when out of range.
    std::int64_t normalize(std::int64_t d, std::int64_t rank)
    {
        if (d < -rank || d >= rank)
            return -1;
        return d < 0 ? d + rank : d;
    }

    /// One step: reshape.
    tensor reshape_step(fuzz_input& in, const tensor& t)
    {
        tensor out;
        shape_type to(in.choice(5));
        for (auto& e : to)
            e = in.byte() < 40 ? -1 : in.integer(6);
        int minus_ones = 0;
        bool bad = false;
        __int128 known = 1;
        bool overflow = false;
        for (const std::int64_t e : to)
        {
            if (e == -1)
                ++minus_ones;
            else if (e < 0)
                bad = true;
            else if (!overflow)
            {
                known *= e;
                overflow = known > int64_max;
            }
        }
        const bool has_zero = [&] {
            for (const std::int64_t e : to)
                if (e == 0)
                    return true;
            return false;
        }();
        if (overflow && has_zero)
            overflow = false, known = 0;
        const __int128 n = t.numel();
        shape_type expected = to;
        bool reject = bad || minus_ones > 1 || overflow;
        if (!reject && minus_ones == 1)
        {
            if (known == 0 || n % known != 0)
                reject = true;
            else
                for (auto& e : expected)
                    if (e == -1)
                        e = static_cast<std::int64_t>(n / known);
        }
        else if (!reject)
            reject = known != n;
        // A non-contiguous input is copied: only when small.
        if (!reject && !t.is_contiguous() && t.numel() > fuzz::max_elements)
            return tensor();
        out = fuzz::checked_op(target, describe("reshape", t, list(to)), reject, reject ? nullptr : &expected,
                               [&] { return reshape(t, to); });
        return out;
    }

    /// One step: permute.
    tensor permute_step(fuzz_input& in, const tensor& t)
    {
        const std::int64_t rank = t.dim();
        const shape_type& shape = t.shape();
        tensor out;
        std::vector<std::int64_t> dims(static_cast<std::size_t>(rank));
        for (std::size_t i = 0; i < dims.size(); ++i)
            dims[i] = static_cast<std::int64_t>(i);
        for (std::size_t i = 0; i + 1 < dims.size(); ++i)
            std::swap(dims[i], dims[i + in.choice(dims.size() - i)]);
        const std::uint8_t mode = in.byte();
        if (mode >= 200 && !dims.empty())
            dims[in.choice(dims.size())] = in.integer_in(-4, 4);
        else if (mode >= 180)
            dims.push_back(in.integer(4));
        else if (mode >= 160)
            for (auto& d : dims)
                d -= rank; // negative form: valid
        bool reject = static_cast<std::int64_t>(dims.size()) != rank;
        shape_type expected(dims.size());
        std::vector<bool> seen(dims.size(), false);
        for (std::size_t i = 0; i < dims.size() && !reject; ++i)
        {
            const std::int64_t d = normalize(dims[i], rank);
            if (d < 0 || seen[static_cast<std::size_t>(d)])
                reject = true;
            else
            {
                seen[static_cast<std::size_t>(d)] = true;
                expected[i] = shape[static_cast<std::size_t>(d)];
            }
        }
        out = fuzz::checked_op(target, describe("permute", t, list(dims)), reject, reject ? nullptr : &expected,
                               [&] { return permute(t, dims); });
        return out;
    }

    /// One step: transpose.
    tensor transpose_step(fuzz_input& in, const tensor& t)
    {
        const std::int64_t rank = t.dim();
        const shape_type& shape = t.shape();
        tensor out;
        const std::int64_t d0 = in.integer_in(-3, 3), d1 = in.integer_in(-3, 3);
        const std::int64_t a = normalize(d0, rank), b = normalize(d1, rank);
        const bool reject = a < 0 || b < 0;
        shape_type expected = shape;
        if (!reject)
            std::swap(expected[static_cast<std::size_t>(a)], expected[static_cast<std::size_t>(b)]);
        out = fuzz::checked_op(target, describe("transpose", t, std::to_string(d0) + ", " + std::to_string(d1)), reject,
                               reject ? nullptr : &expected, [&] { return transpose(t, d0, d1); });
        return out;
    }

    /// One step: slice.
    tensor slice_step(fuzz_input& in, const tensor& t)
    {
        const std::int64_t rank = t.dim();
        const shape_type& shape = t.shape();
        tensor out;
        const std::int64_t dim = in.integer_in(-1, 3);
        const std::int64_t start = in.integer_in(-2, 6), stop = in.integer(8), sstep = in.integer(3);
        const std::int64_t d = normalize(dim, rank);
        // Python's rules: a positive step counts start, start + step, ... < stop (both
        // clamped to [0, n]); a negative one start, start + step, ... > stop (both clamped
        // to [-1, n - 1]); step 0, and INT64_MIN (no positive counterpart), are rejected.
        const bool reject = d < 0 || sstep == 0 || sstep == std::numeric_limits<std::int64_t>::min();
        // A negative step copies (a flip), so it is tried on small tensors only, as the
        // copies below are.
        if (!reject && sstep < 0 && t.numel() > fuzz::max_elements)
            return tensor();
        shape_type expected = shape;
        if (!reject)
        {
            const __int128 n = shape[static_cast<std::size_t>(d)];
            if (sstep > 0)
            {
                auto clamp = [&](__int128 v) {
                    if (v < 0)
                        v += n;
                    return v < 0 ? __int128{0} : (v > n ? n : v);
                };
                const __int128 b = clamp(start), e = clamp(stop);
                expected[static_cast<std::size_t>(d)] = e > b ? static_cast<std::int64_t>((e - b + sstep - 1) / sstep)
                                                              : 0;
            }
            else
            {
                auto clamp = [&](__int128 v) {
                    if (v < 0)
                        v += n;
                    return v < -1 ? __int128{-1} : (v > n - 1 ? n - 1 : v);
                };
                const __int128 first = clamp(start), last = clamp(stop), stride = -__int128{sstep};
                expected[static_cast<std::size_t>(d)] = first > last
                                                            ? static_cast<std::int64_t>((first - last - 1) / stride + 1)
                                                            : 0;
            }
        }
        out = fuzz::checked_op(target,
                               describe("slice", t,
                                        "dim " + std::to_string(dim) + ", " + std::to_string(start) + ":" +
                                            std::to_string(stop) + ":" + std::to_string(sstep)),
                               reject, reject ? nullptr : &expected, [&] { return slice(t, dim, start, stop, sstep); });
        return out;
    }

    /// One step: expand (a view: any size).
    tensor expand_step(fuzz_input& in, const tensor& t)
    {
        const shape_type& shape = t.shape();
        tensor out;
        const std::size_t extra = in.choice(3);
        shape_type to(extra);
        for (auto& e : to)
            e = in.integer(4);
        for (const std::int64_t e : shape)
            to.push_back(e == 1 && in.boolean() ? in.integer(5) : e);
        if (in.byte() >= 230 && !to.empty())
            to[in.choice(to.size())] = in.integer(5);
        bool reject = false, uncertain = false;
        for (std::size_t i = 0; i < to.size(); ++i)
        {
            if (to[i] == -1)
                uncertain = true; // "keep this extent" is not in the contract: no claim
            else if (to[i] < 0)
                reject = true;
            else if (i >= extra && shape[i - extra] != 1 && shape[i - extra] != to[i])
                reject = true;
        }
        if (!uncertain && !reject && !fuzz::exact_numel(to))
            reject = true; // an element count beyond int64
        if (uncertain)
        {
            fuzz::attempt([&] { out = expand(t, to); });
            return out;
        }
        out = fuzz::checked_op(target, describe("expand", t, list(to)), reject, reject ? nullptr : &to,
                               [&] { return expand(t, to); });
        return out;
    }

    /// One step: concat (only when every tensor so far is small).
    tensor concat_step(fuzz_input& in, const tensor& t, bool small)
    {
        const std::int64_t rank = t.dim();
        const shape_type& shape = t.shape();
        tensor out;
        if (!small || rank == 0)
            return tensor();
        const std::int64_t dim = in.integer_in(-rank, rank);
        const std::int64_t d = normalize(dim, rank);
        std::vector<tensor> xs{t};
        const std::size_t more = in.choice(3);
        shape_type expected = shape;
        for (std::size_t k = 0; k < more; ++k)
        {
            shape_type other = shape;
            const std::int64_t along = in.integer(3);
            if (d >= 0)
                other[static_cast<std::size_t>(d)] = along;
            if (in.byte() >= 230)
            {
                auto& e = other[in.choice(other.size())];
                e = e < fuzz::max_elements ? e + 1 : 0; // a mismatch, unless it hit d
            }
            if (!fuzz::fits(other))
                return tensor();
            dtype dt = t.dtype();
            if (in.byte() >= 240)
                dt = in.floating_dtype();
            xs.push_back(fuzz::make_tensor(in, other, dt));
        }
        // Exact rule: every shape equal to t's except along d, and one dtype.
        bool reject = d < 0;
        __int128 total = 0;
        for (const tensor& x : xs)
        {
            if (reject)
                break;
            if (x.dtype() != t.dtype() || x.dim() != rank)
                reject = true;
            for (std::int64_t i = 0; i < rank && !reject; ++i)
                if (i != d && x.shape()[static_cast<std::size_t>(i)] != shape[static_cast<std::size_t>(i)])
                    reject = true;
            if (!reject)
                total += x.shape()[static_cast<std::size_t>(d)];
        }
        if (!reject)
        {
            expected[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(total);
            if (!fuzz::small_result(expected))
                return tensor();
        }
        out = fuzz::checked_op(target, describe("concat", t, "dim " + std::to_string(dim)), reject,
                               reject ? nullptr : &expected, [&] { return concat(xs, dim); });
        return out;
    }

    /// One step: pad.
    tensor pad_step(fuzz_input& in, const tensor& t)
    {
        const std::int64_t rank = t.dim();
        const shape_type& shape = t.shape();
        tensor out;
        std::vector<std::pair<std::int64_t, std::int64_t>> widths(static_cast<std::size_t>(rank));
        for (auto& w : widths)
            w = {in.integer(2), in.integer(2)};
        if (in.byte() >= 240)
            widths.resize(in.choice(6));
        bool reject = static_cast<std::int64_t>(widths.size()) != rank;
        shape_type expected = shape;
        bool overflow = false;
        for (std::size_t i = 0; i < widths.size() && !reject; ++i)
        {
            if (widths[i].first < 0 || widths[i].second < 0)
            {
                reject = true;
                break;
            }
            const __int128 e = __int128{shape[i]} + widths[i].first + widths[i].second;
            if (e > int64_max)
                overflow = true;
            else
                expected[i] = static_cast<std::int64_t>(e);
        }
        if (!reject && (overflow || !fuzz::exact_numel(expected)))
            reject = true; // the padded tensor's size is beyond int64
        if (!reject && !fuzz::small_result(expected))
            return tensor(); // legal but large
        std::string args;
        for (const auto& w : widths)
            args += "{" + std::to_string(w.first) + ", " + std::to_string(w.second) + "}";
        out = fuzz::checked_op(target, describe("pad", t, args), reject, reject ? nullptr : &expected,
                               [&] { return pad(t, widths, in.real()); });
        return out;
    }

    /// One step: slice_backward: t embedded into zeros of a larger shape.
    tensor slice_backward_step(fuzz_input& in, const tensor& t)
    {
        const std::int64_t rank = t.dim();
        const shape_type& shape = t.shape();
        tensor out;
        shape_type big = shape;
        const std::int64_t dim = in.integer_in(-1, 3);
        const std::int64_t start = in.integer(4), sstep = in.integer(3);
        const std::int64_t d = normalize(dim, rank);
        if (d >= 0)
            big[static_cast<std::size_t>(d)] = in.integer(8);
        const auto n = fuzz::exact_numel(big);
        if (n && *n > fuzz::max_elements)
            return tensor();
        const bool reject = !n || sstep < 1 || d < 0;
        out = fuzz::checked_op(target,
                               describe("slice_backward", t,
                                        fuzz::shape_string(big) + ", dim " + std::to_string(dim) + ", start " +
                                            std::to_string(start) + ", step " + std::to_string(sstep)),
                               reject, nullptr, [&] { return slice_backward(t, big, dim, start, sstep); });
        if (out.defined())
            XGRAD_FUZZ_CHECK(target, out.shape() == big, "slice_backward shape");
        return out;
    }

    /// One step: cast / contiguous: copies.
    tensor copy_step(fuzz_input& in, const tensor& t)
    {
        const shape_type& shape = t.shape();
        tensor out;
        if (t.numel() > fuzz::max_elements)
            return tensor();
        const dtype dt = in.floating_dtype(false);
        fuzz::attempt([&] { out = in.boolean() ? cast(t, dt) : contiguous(t); });
        if (out.defined())
            XGRAD_FUZZ_CHECK(target, out.shape() == shape, "cast/contiguous shape");
        return out;
    }

    void step(fuzz_input& in, chain_state& s)
    {
        const tensor& t = s.t;
        const shape_type& shape = t.shape();
        tensor out;
        switch (in.choice(9))
        {
        case 0: out = reshape_step(in, t); break;
        case 1: out = permute_step(in, t); break;
        case 2: out = transpose_step(in, t); break;
        case 3: out = slice_step(in, t); break;
        case 4: out = expand_step(in, t); break;
        case 5: out = concat_step(in, t, s.small); break;
        case 6: out = pad_step(in, t); break;
        case 7: out = slice_backward_step(in, t); break;
        default: out = copy_step(in, t); break;
        }
        if (out.defined())
        {
            // A tensor an op returned must have an element count (its shape may be huge, not
            // beyond int64: an op accepting such a shape must have rejected it instead).
            std::int64_t n = 0;
            if (!fuzz::attempt([&] { n = out.numel(); }))
                fuzz::fail(target, "an op on " + fuzz::shape_string(shape) + " returned a tensor of shape " +
                                       fuzz::shape_string(out.shape()) + " whose numel() throws");
            s.t = out;
            s.small = s.small && n <= fuzz::max_elements;
        }
    }

    void run(fuzz_input& in)
    {
        shape_type shape(in.choice(5));
        for (auto& e : shape)
            e = in.integer(5);
        if (!fuzz::fits(shape))
            return;
        const dtype dt = in.floating_dtype();
        const bool grad = is_floating(dt) && in.boolean();
        tensor leaf = fuzz::make_tensor(in, shape, dt);
        if (grad)
            leaf.requires_grad_();
        chain_state s{leaf, true};
        const std::size_t steps = 1 + in.choice(4);
        for (std::size_t i = 0; i < steps; ++i)
            step(in, s);
        if (grad && s.small && s.t.requires_grad())
        {
            s.t.backward(ones_like(s.t), false, in.boolean());
            const tensor g = leaf.grad();
            XGRAD_FUZZ_CHECK(target, !g.defined() || g.shape() == leaf.shape(), "gradient shape");
            leaf.zero_grad(); // breaks the leaf -> gradient -> graph cycle of create_graph
        }
    }
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size)
{
    fuzz_input in(data, size);
    run(in);
    return 0;
}
