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
            bool m_scientific = false;
            std::size_t m_width = 0;

            std::string format(double v) const
            {
                char buf[64];
                if (m_scientific)
                    std::snprintf(buf, sizeof buf, "%.4e", v);
                else
                    std::snprintf(buf, sizeof buf, "%.4f", v);
                return buf;
            }
        };

        /// Elements as text; int64 values are read as int64 (a double cannot hold them all).
        std::vector<std::string> format_all(const tensor& t, formatter& f)
        {
            std::vector<std::string> text(static_cast<std::size_t>(t.numel()));
            if (text.empty())
                return text; // nothing to read (and no contiguous copy to make of an empty view)
            if (t.dtype() == dtype::int64)
            {
                std::vector<std::int64_t> v(text.size());
                to_host(t, v.data(), dtype::int64);
                for (std::size_t i = 0; i < v.size(); ++i)
                    text[i] = std::to_string(v[i]);
            }
            else
            {
                const std::vector<double> v = to_vector(t);
                double amax = 0, amin_nonzero = HUGE_VAL;
                for (double x : v)
                    if (std::isfinite(x))
                    {
                        amax = std::max(amax, std::fabs(x));
                        if (x != 0)
                            amin_nonzero = std::min(amin_nonzero, std::fabs(x));
                    }
                f.m_scientific = amax >= 1e5 || (amin_nonzero < 1e-4 && amax > 0);
                for (std::size_t i = 0; i < v.size(); ++i)
                    text[i] = f.format(v[i]);
            }
            for (const auto& s : text)
                f.m_width = std::max(f.m_width, s.size());
            return text;
        }

        void print_rec(std::ostringstream& os, const std::vector<std::string>& v, const shape_type& shape,
                       const strides_type& strides, std::size_t d, std::int64_t base, const formatter& f,
                       bool summarize, std::size_t indent)
        {
            if (d == shape.size())
            {
                const std::string& s = v[static_cast<std::size_t>(base)];
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
        formatter f;
        const std::vector<std::string> v = format_all(*this, f);

        std::ostringstream os;
        os << "tensor(";
        const std::size_t indent = 7; // strlen("tensor(")
        // An empty tensor is summarized too when an extent is long ([2^40, 0] prints six empty
        // rows, not 2^40), and indexes no element, so its strides are not needed (the
        // contiguous ones may not even fit int64).
        const std::int64_t count = numel();
        bool summarize = count > summarize_above;
        for (const std::int64_t e : shape())
            summarize = summarize || e > summarize_above;
        const strides_type strides = count == 0 ? strides_type(shape().size(), 0) : contiguous_strides(shape());
        print_rec(os, v, shape(), strides, 0, 0, f, summarize, indent);
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
