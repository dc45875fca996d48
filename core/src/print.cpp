// Readable printing, in the style of NumPy/PyTorch: nested brackets, aligned columns, long
// dimensions elided to their first and last three entries.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "xgrad/autograd.hpp"
#include "xgrad/factories.hpp"
#include "xgrad/tensor.hpp"

namespace xgrad
{
    namespace
    {
        constexpr std::int64_t summarize_above = 1000; // elements
        constexpr std::int64_t edge_items = 3;

        struct formatter
        {
            bool m_integer = false;  // int64 dtype
            bool m_scientific = false;
            std::size_t m_width = 0;

            std::string format(double v) const
            {
                char buf[64];
                if (m_integer)
                    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(v));
                else if (m_scientific)
                    std::snprintf(buf, sizeof buf, "%.4e", v);
                else
                    std::snprintf(buf, sizeof buf, "%.4f", v);
                return buf;
            }
        };

        void print_rec(std::ostringstream& os, const std::vector<double>& v, const shape_type& shape,
                       const strides_type& strides, std::size_t d, std::int64_t base, const formatter& f,
                       bool summarize, std::size_t indent)
        {
            if (d == shape.size())
            {
                std::string s = f.format(v[static_cast<std::size_t>(base)]);
                os << std::string(f.m_width > s.size() ? f.m_width - s.size() : 0, ' ') << s;
                return;
            }
            os << '[';
            const std::int64_t n = shape[d];
            const bool elide = summarize && n > 2 * edge_items;
            for (std::int64_t i = 0; i < n; ++i)
            {
                if (elide && i == edge_items)
                {
                    os << (d + 1 == shape.size() ? "..., " : "...,\n" + std::string(indent + d + 1, ' '));
                    i = n - edge_items;
                }
                print_rec(os, v, shape, strides, d + 1, base + i * strides[d], f, summarize, indent);
                if (i + 1 < n)
                    os << (d + 1 == shape.size() ? ", " : ",\n" + std::string(indent + d + 1, ' '));
            }
            os << ']';
        }
    }

    std::string tensor::to_string() const
    {
        if (!defined())
            return "tensor(undefined)";
        const std::vector<double> v = to_vector(*this);
        formatter f;
        f.m_integer = dtype() == xgrad::dtype::int64;
        double amax = 0, amin_nonzero = HUGE_VAL;
        for (double x : v)
            if (std::isfinite(x))
            {
                amax = std::max(amax, std::fabs(x));
                if (x != 0)
                    amin_nonzero = std::min(amin_nonzero, std::fabs(x));
            }
        f.m_scientific = !f.m_integer && (amax >= 1e5 || (amin_nonzero < 1e-4 && amax > 0));
        for (double x : v)
            f.m_width = std::max(f.m_width, f.format(x).size());

        std::ostringstream os;
        os << "tensor(";
        const std::size_t indent = 7; // strlen("tensor(")
        print_rec(os, v, shape(), contiguous_strides(shape()), 0, 0, f, numel() > summarize_above, indent);
        os << ", shape=" << shape_to_string(shape()) << ", dtype=" << name(dtype());
        if (device() != cpu_device)
            os << ", device=" << xgrad::to_string(device());
        if (grad_fn())
            os << ", grad_fn=<" << grad_fn()->name() << '>';
        else if (requires_grad())
            os << ", requires_grad";
        os << ')';
        return os.str();
    }
}
