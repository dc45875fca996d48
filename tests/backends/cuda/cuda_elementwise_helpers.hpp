#pragma once
// Shared by the tests of the CUDA backend's elementwise kernels and reduction against the CPU
// (test_cuda_elementwise.cpp: fill, copy, unary, binary, where at the kernel level;
// test_cuda_reduce.cpp: reduce, kernels and ops; test_cuda_elementwise_ops.cpp: the public
// ops). test_cuda_elementwise.cpp's header comment states the tolerances and why.
// Kernel-level helpers: device buffers, random shapes and values (special values and NaN
// patterns included), storage comparison of strided views. Op-level helpers: bitwise, ulp and
// sum comparisons of tensors, random views.
//   of cuda_test_helpers.hpp (a few float32 ulp can move the rounding by one 16-bit step).
// - Gradients: tolerance() (the backward graph chains exp, tanh, pow, log and sums).
#include "tests/backends/cuda/cuda_test_helpers.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "backends/common/convert.hpp"
#include "core/src/dispatch.hpp"
#include "tests/support/cpu_kernels_helpers.hpp"

using namespace cuda_test;
namespace ckt = cpu_kernels_test;
using ckt::layout;
using ckt::shape_t;

namespace cuda_elementwise_test
{
    using namespace cuda_test;
    namespace ckt = cpu_kernels_test;
    using ckt::layout;
    using ckt::shape_t;
    namespace cpu = xgrad::cpu;
    using xgrad::kernels::binary_op;
    using xgrad::kernels::reduce_op;
    using xgrad::kernels::unary_op;

    inline const xgrad::detail::backend_kernels& dev() { return xgrad::detail::backend_for(gpu); }

    /// The ulp tolerance of exp, log, tanh, sigmoid and pow (test_cuda_elementwise.cpp's header).
    constexpr std::int64_t libm_ulps = 8;

    // ---------------------------------------------------------------------------------------
    // Kernel-level helpers

    /// A host vector's copy in device memory (from the dispatch table's allocator), freed at
    /// scope exit.
    template <class T>
    class device_copy
    {
    public:
        explicit device_copy(const std::vector<T>& host) : m_n(host.size())
        {
            m_ptr = dev().allocate(m_n * sizeof(T));
            if (m_n)
                dev().copy_from_host(m_ptr, host.data(), m_n * sizeof(T));
        }
        ~device_copy() { dev().deallocate(m_ptr); }
        device_copy(const device_copy&) = delete;
        device_copy& operator=(const device_copy&) = delete;

        void* get() const { return m_ptr; }
        std::vector<T> download() const
        {
            std::vector<T> host(m_n);
            if (m_n)
                dev().copy_to_host(host.data(), m_ptr, m_n * sizeof(T));
            return host;
        }

    private:
        std::size_t m_n;
        void* m_ptr;
    };

    /// Random shapes as ckt::random_shape, and now and then one with a size-0 dimension.
    inline shape_t random_shape(std::mt19937_64& gen, int max_ndim = 4, std::int64_t max_numel = 150000)
    {
        shape_t s = ckt::random_shape(gen, max_ndim, max_numel);
        if (!s.empty() && gen() % 8 == 0)
            s[gen() % s.size()] = 0;
        return s;
    }

    template <class T>
    constexpr bool is_float_v = std::is_same_v<T, float> || std::is_same_v<T, double>;

    /// The bits of a 16-bit value or of an int64, float, double.
    template <class T>
    bool same_bits(T a, T b)
    {
        return std::memcmp(&a, &b, sizeof a) == 0;
    }

    /// NaN matches any NaN; everything else by its bits (so +0 and -0 differ).
    template <class T>
    bool same_or_nan(T got, T want)
    {
        return std::isnan(want) ? std::isnan(got) : same_bits(got, want);
    }

    template <class T>
    bool is_nan(T v)
    {
        if constexpr (is_float_v<T>)
            return std::isnan(v);
        else if constexpr (std::is_same_v<T, std::int64_t>)
            return false;
        else
            return std::isnan(xgrad::to_float(v));
    }

    /// Whether converting X to O goes through a hardware float <-> double conversion, where a
    /// GPU need not keep a NaN's payload.
    template <class O, class X>
    constexpr bool hardware_float_double()
    {
        if constexpr (std::is_same_v<O, double>)
            return !std::is_same_v<X, double> && !std::is_same_v<X, std::int64_t>;
        else if constexpr (std::is_same_v<O, float>)
            return std::is_same_v<X, double>;
        else
            return false;
    }

    /// A copy's result: the same bits; a NaN matches any NaN only after a hardware float <->
    /// double conversion.
    template <class O, class X>
    bool copy_matches(O got, O want)
    {
        if constexpr (hardware_float_double<O, X>())
            if (is_nan(want))
                return is_nan(got);
        return same_bits(got, want);
    }

    /// Values for copy and fill: normal numbers of every magnitude, the specials (NaN with
    /// payloads, +-inf, +-0, subnormals of every width, float16's overflow threshold, values
    /// beyond int64's range, halfway cases).
    inline std::vector<double> special_doubles()
    {
        const double inf = std::numeric_limits<double>::infinity();
        return {0.0,
                -0.0,
                inf,
                -inf,
                std::nan(""),
                -std::nan(""),
                1.0,
                -1.0,
                0.5,
                -2.5,
                3.7,
                -3.7,
                65504.0,
                65519.99,
                65520.0,
                -65520.0,
                1e5,
                std::ldexp(1.0, -24), // float16's smallest subnormal
                std::ldexp(1.0, -25), // half of it: rounds to even (0)
                std::ldexp(3.0, -26), // 0.75 of it: rounds up
                6.1e-5,               // near float16's smallest normal
                1e-8,
                1e-30,
                1.5e-45, // float's smallest subnormal
                std::numeric_limits<float>::denorm_min() * 3.0,
                std::numeric_limits<double>::denorm_min(),
                std::numeric_limits<double>::min(),
                3.4028235677973366e38, // above FLT_MAX: float overflow when rounded
                static_cast<double>(std::numeric_limits<float>::max()),
                1e300,
                -1e300,
                9.3e18,
                -9.3e18,
                9223372036854775808.0,                             // 2^63: INT64_MAX
                -9223372036854775808.0,                            // -2^63: INT64_MIN exactly
                9223372036854774784.0,                             // the largest double below 2^63
                1.0 + std::ldexp(1.0, -23) + std::ldexp(1.0, -40), // rounds up to float16/bfloat16
                1.0 + std::ldexp(1.0, -8),                         // a bfloat16 tie
                std::ldexp(1.0, 60) + std::ldexp(1.0, 52) + 1.0};
    }

    /// NaN bit patterns with payloads and both signs (quiet, so that the CPU's F16C
    /// conversions treat them as the portable ones do).
    template <class T>
    std::vector<T> nan_patterns()
    {
        if constexpr (std::is_same_v<T, float>)
        {
            std::vector<T> v;
            for (const std::uint32_t bits : {0x7fc00000u, 0xffc00000u, 0x7fc12345u, 0xffe00001u, 0x7fffffffu})
            {
                float f;
                std::memcpy(&f, &bits, sizeof f);
                v.push_back(f);
            }
            return v;
        }
        else if constexpr (std::is_same_v<T, double>)
        {
            std::vector<T> v;
            for (const std::uint64_t bits :
                 {0x7ff8000000000000ull, 0xfff8000000000000ull, 0x7ff8123456789abcull, 0xfffc000000000001ull})
            {
                double d;
                std::memcpy(&d, &bits, sizeof d);
                v.push_back(d);
            }
            return v;
        }
        else if constexpr (std::is_same_v<T, xgrad::float16_t>)
            return {T{0x7e00}, T{0xfe00}, T{0x7e01}, T{0xff23}};
        else if constexpr (std::is_same_v<T, xgrad::bfloat16_t>)
            return {T{0x7fc0}, T{0xffc0}, T{0x7fc1}, T{0xffe5}};
        else
            return {};
    }

    /// v rounded to T as the CPU's convert does (saturating for int64).
    template <class T>
    T from_double(double v)
    {
        return xgrad::kernels::detail::convert<T>(v);
    }

    /// Random values for copy: a third specials (and NaN patterns), the rest normal with a
    /// random magnitude; int64 gets small, huge and extreme values.
    template <class T>
    void random_values(std::vector<T>& v, std::mt19937_64& gen)
    {
        const auto specials = special_doubles();
        const auto nans = nan_patterns<T>();
        std::normal_distribution<double> normal(0, 1);
        std::uniform_int_distribution<int> exponent(-30, 30);
        for (auto& x : v)
        {
            const auto r = gen() % 60;
            if constexpr (std::is_same_v<T, std::int64_t>)
            {
                constexpr std::int64_t top = std::numeric_limits<std::int64_t>::max();
                constexpr std::int64_t bottom = std::numeric_limits<std::int64_t>::min();
                const std::int64_t extremes[] = {top,
                                                 top - 1,
                                                 bottom,
                                                 bottom + 1,
                                                 0,
                                                 -1,
                                                 65520,
                                                 (std::int64_t{1} << 53) + 1,
                                                 (std::int64_t{1} << 60) + (std::int64_t{1} << 52) + 1,
                                                 -(std::int64_t{1} << 24) - 1};
                if (r < std::size(extremes))
                    x = extremes[r];
                else if (r < 30)
                    x = static_cast<std::int64_t>(gen()); // anywhere in the range
                else
                    x = static_cast<std::int64_t>(std::trunc(normal(gen) * 1e5));
            }
            else
            {
                if (r < nans.size())
                    x = nans[r];
                else if (r < 20 && r - nans.size() < specials.size())
                    x = from_double<T>(specials[(r - nans.size()) % specials.size()]);
                else
                    x = from_double<T>(std::ldexp(normal(gen), exponent(gen)));
            }
        }
    }

    template <class T>
    T garbage()
    {
        if constexpr (std::is_same_v<T, std::int64_t>)
            return std::int64_t{0x5a5a5a5a5a5a};
        else if constexpr (std::is_same_v<T, xgrad::float16_t>)
            return xgrad::float16_t{0x7e01};
        else if constexpr (std::is_same_v<T, xgrad::bfloat16_t>)
            return xgrad::bfloat16_t{0x7fc1};
        else
            return std::numeric_limits<T>::quiet_NaN();
    }

    template <class T>
    T garbage_cpu()
    {
        if constexpr (is_float_v<T>)
            return T(-7.25);
        else
            return garbage<T>();
    }

    /// Compares the device's output storage with the CPU's: ok(got, want, i) inside the view,
    /// and outside it each side's own garbage, bit for bit. "" or the first mismatch.
    template <class T, class Ok>
    std::string compare_storage(const ckt::view<T>& got, const ckt::view<T>& want, Ok ok)
    {
        std::vector<char> inside(got.storage.size(), 0);
        const auto offs = ckt::offsets_of(got.shape, got.strides);
        for (std::size_t i = 0; i < offs.size(); ++i)
        {
            const auto o = static_cast<std::size_t>(offs[i]);
            inside[o] = 1;
            if (!ok(got.storage[o], want.storage[o], i))
            {
                std::ostringstream os;
                os.precision(17);
                os << "element " << i << " (offset " << o << "): device " << ckt::as_double(got.storage[o]) << ", cpu "
                   << ckt::as_double(want.storage[o]);
                return os.str();
            }
        }
        for (std::size_t o = 0; o < inside.size(); ++o)
            if (!inside[o] &&
                (!same_bits(got.storage[o], garbage<T>()) || !same_bits(want.storage[o], garbage_cpu<T>())))
                return "storage outside the view was written at offset " + std::to_string(o);
        return "";
    }

    /// An output view (random layout) pre-filled with garbage; `want` is its CPU twin.
    template <class T>
    std::pair<ckt::view<T>, ckt::view<T>> output_views(const shape_t& shape, std::mt19937_64& gen, layout kind)
    {
        auto got = ckt::make_view<T>(shape, kind, gen, garbage<T>());
        auto want = got;
        std::fill(want.storage.begin(), want.storage.end(), garbage_cpu<T>());
        return {got, want};
    }

    inline layout random_out_layout(std::mt19937_64& gen) { return ckt::out_layouts[gen() % ckt::out_layouts.size()]; }
    inline layout random_in_layout(std::mt19937_64& gen) { return ckt::in_layouts[gen() % ckt::in_layouts.size()]; }

    // ---------------------------------------------------------------------------------------
    // Op-level helpers

    /// Bytes of t (any device) as its own dtype, row-major.
    inline std::vector<unsigned char> bytes_of(const tensor& t)
    {
        const tensor h = t.to(cpu_device).contiguous();
        std::vector<unsigned char> b(static_cast<std::size_t>(h.numel()) * itemsize(h.dtype()));
        if (!b.empty())
            to_host(h, b.data(), h.dtype());
        return b;
    }

    /// Element i of a byte vector of dtype dt, as double (NaN-ness is all the callers use).
    inline double element_of(const std::vector<unsigned char>& b, dtype dt, std::size_t i)
    {
        const unsigned char* p = b.data() + i * itemsize(dt);
        switch (dt)
        {
        case dtype::float32:
        {
            float v;
            std::memcpy(&v, p, 4);
            return v;
        }
        case dtype::float64:
        {
            double v;
            std::memcpy(&v, p, 8);
            return v;
        }
        case dtype::float16:
        {
            xgrad::float16_t v;
            std::memcpy(&v, p, 2);
            return xgrad::to_float(v);
        }
        case dtype::bfloat16:
        {
            xgrad::bfloat16_t v;
            std::memcpy(&v, p, 2);
            return xgrad::to_float(v);
        }
        case dtype::int64:
        {
            std::int64_t v;
            std::memcpy(&v, p, 8);
            return static_cast<double>(v);
        }
        }
        return 0;
    }

    /// CHECKs that dev holds ref's bits element by element; with any_nan, a NaN matches any NaN.
    inline void check_identical(const tensor& ref, const tensor& dev_t, bool any_nan, const std::string& what)
    {
        REQUIRE_MESSAGE(ref.shape() == dev_t.shape(), what << ": shapes " << shape_to_string(ref.shape()) << " and "
                                                           << shape_to_string(dev_t.shape()));
        REQUIRE_MESSAGE(ref.dtype() == dev_t.dtype(), what << ": dtypes differ");
        CHECK_MESSAGE(dev_t.device() == gpu, what << ": the result is not on the device");
        const dtype dt = ref.dtype();
        const std::size_t size = itemsize(dt);
        const auto r = bytes_of(ref), d = bytes_of(dev_t);
        std::int64_t bad = 0, first = -1;
        for (std::size_t i = 0; i < r.size() / size; ++i)
        {
            bool ok = std::memcmp(r.data() + i * size, d.data() + i * size, size) == 0;
            if (!ok && any_nan && std::isnan(element_of(r, dt, i)))
                ok = std::isnan(element_of(d, dt, i));
            if (!ok && bad++ == 0)
                first = static_cast<std::int64_t>(i);
        }
        CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << r.size() / size
                                     << " elements differ; first at flat index " << first << ": cpu "
                                     << (first >= 0 ? element_of(r, dt, static_cast<std::size_t>(first)) : 0.0)
                                     << ", device "
                                     << (first >= 0 ? element_of(d, dt, static_cast<std::size_t>(first)) : 0.0));
    }

    /// CHECKs that dev is within `ulps` of ref (float32 or float64) element by element.
    inline void check_ulps(const tensor& ref, const tensor& dev_t, std::int64_t ulps, const std::string& what)
    {
        REQUIRE_MESSAGE(ref.shape() == dev_t.shape(), what << ": shapes differ");
        REQUIRE_MESSAGE(ref.dtype() == dev_t.dtype(), what << ": dtypes differ");
        const std::vector<double> r = to_vector(ref), d = to_vector(dev_t.to(cpu_device));
        std::int64_t bad = 0, first = -1, worst = 0;
        for (std::size_t i = 0; i < r.size(); ++i)
        {
            const std::int64_t dist = ref.dtype() == dtype::float32
                                          ? ckt::ulp_distance(static_cast<float>(r[i]), static_cast<float>(d[i]))
                                          : ckt::ulp_distance(r[i], d[i]);
            worst = std::max(worst, dist);
            if (dist > ulps && bad++ == 0)
                first = static_cast<std::int64_t>(i);
        }
        CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << r.size() << " elements differ by more than " << ulps
                                     << " ulp (worst " << worst << "); first at flat index " << first << ": cpu "
                                     << (first >= 0 ? r[static_cast<std::size_t>(first)] : 0.0) << ", device "
                                     << (first >= 0 ? d[static_cast<std::size_t>(first)] : 0.0));
    }

    /// CHECKs a sum-like result against the CPU's: |d - c| <= rel * scale per element, where
    /// scale holds sum|x| of each output (CPU tensor of the same shape).
    inline void check_sum_close(const tensor& ref, const tensor& dev_t, const tensor& scale, double rel,
                                const std::string& what)
    {
        REQUIRE_MESSAGE(ref.shape() == dev_t.shape(), what << ": shapes " << shape_to_string(ref.shape()) << " and "
                                                           << shape_to_string(dev_t.shape()));
        CHECK_MESSAGE(dev_t.device() == gpu, what << ": the result is not on the device");
        const std::vector<double> r = to_vector(ref), d = to_vector(dev_t.to(cpu_device)), s = to_vector(scale);
        std::int64_t bad = 0, first = -1;
        for (std::size_t i = 0; i < r.size(); ++i)
        {
            const bool ok = std::isnan(r[i])   ? std::isnan(d[i])
                            : std::isinf(r[i]) ? d[i] == r[i]
                                               : std::abs(d[i] - r[i]) <= rel * s[i] + 1e-300;
            if (!ok && bad++ == 0)
                first = static_cast<std::int64_t>(i);
        }
        CHECK_MESSAGE(bad == 0, what << ": " << bad << " of " << r.size() << " elements differ beyond " << rel
                                     << " * sum|x|; first at flat index " << first << ": cpu "
                                     << (first >= 0 ? r[static_cast<std::size_t>(first)] : 0.0) << ", device "
                                     << (first >= 0 ? d[static_cast<std::size_t>(first)] : 0.0));
    }

    /// A random shape for the op tests: ndim 0..4, sizes with odd ones, 1 and now and then 0.
    inline shape_type op_shape(std::mt19937_64& gen, int max_ndim = 4, std::int64_t max_numel = 20000)
    {
        static constexpr std::int64_t sizes[] = {1, 2, 3, 5, 7, 13, 16, 31, 64, 97};
        for (;;)
        {
            const int ndim = static_cast<int>(gen() % static_cast<unsigned>(max_ndim + 1));
            shape_type s;
            std::int64_t n = 1;
            for (int d = 0; d < ndim; ++d)
            {
                s.push_back(gen() % 16 == 0 ? 0 : sizes[gen() % std::size(sizes)]);
                n *= s.back();
            }
            if (n <= max_numel)
                return s;
        }
    }

    /// A view of a tensor of `shape` that is not plain contiguous (chosen by `kind`): a
    /// permutation of a permuted base, a strided slice of a larger base, or the tensor itself.
    /// `make` creates a base of a given shape (on the CPU); the same view is taken of its
    /// device copy. Returns {cpu view, device view}.
    template <class Make>
    std::pair<tensor, tensor> view_pair(const shape_type& shape, int kind, std::mt19937_64& gen, Make make)
    {
        const auto nd = static_cast<std::int64_t>(shape.size());
        if (kind == 1 && nd >= 2)
        {
            // base has the permuted shape; permuting it back gives `shape` with permuted strides
            std::vector<std::int64_t> perm(shape.size());
            std::iota(perm.begin(), perm.end(), 0);
            std::shuffle(perm.begin(), perm.end(), gen);
            shape_type base_shape(shape.size());
            for (std::size_t i = 0; i < shape.size(); ++i)
                base_shape[i] = shape[static_cast<std::size_t>(perm[i])];
            std::vector<std::int64_t> inverse(shape.size());
            for (std::size_t i = 0; i < shape.size(); ++i)
                inverse[static_cast<std::size_t>(perm[i])] = static_cast<std::int64_t>(i);
            const tensor base = make(base_shape);
            return {base.permute(inverse), base.to(gpu).permute(inverse)};
        }
        if (kind == 2 && nd >= 1)
        {
            // a step-2 slice with an offset along a random dimension
            const std::size_t d = gen() % shape.size();
            shape_type base_shape = shape;
            base_shape[d] = 2 * shape[d] + 1;
            const tensor base = make(base_shape);
            const auto dd = static_cast<std::int64_t>(d);
            return {base.slice(dd, 1, 1 + 2 * shape[d], 2), base.to(gpu).slice(dd, 1, 1 + 2 * shape[d], 2)};
        }
        const tensor base = make(shape);
        return {base, base.to(gpu)};
    }

    /// The shape b broadcast against a: some dims of a set to 1, some leading dims dropped.
    inline shape_type broadcast_partner(const shape_type& a, std::mt19937_64& gen)
    {
        shape_type b = a;
        for (auto& s : b)
            if (gen() % 3 == 0)
                s = 1;
        const std::size_t drop = b.empty() ? 0 : gen() % (b.size() + 1);
        b.erase(b.begin(), b.begin() + static_cast<std::ptrdiff_t>(drop));
        return b;
    }

    inline std::string describe(const tensor& t)
    {
        std::ostringstream os;
        os << shape_to_string(t.shape()) << " strides {";
        for (std::size_t i = 0; i < t.strides().size(); ++i)
            os << (i ? ", " : "") << t.strides()[i];
        os << "} " << name(t.dtype());
        return os.str();
    }
}
