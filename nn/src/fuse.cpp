// nn::fuse (see fuse.hpp). The pass is the one place that knows which layers have fused ops
// together; the sequential only runs what it is given.
#include "xgrad/nn/fuse.hpp"

#include <memory>
#include <typeinfo>

#include "xgrad/nn/activation.hpp"
#include "xgrad/nn/batch_norm.hpp"
#include "xgrad/nn/pool.hpp"
#include "xgrad/nn/sequential.hpp"

namespace xgrad::nn
{
    namespace
    {
        /// m as a T when its class is exactly T (a subclass may compute something else).
        template <class T>
        std::shared_ptr<T> exactly(const std::shared_ptr<module>& m)
        {
            if (!m)
                return nullptr;
            const module& object = *m;
            return typeid(object) == typeid(T) ? std::static_pointer_cast<T>(m) : nullptr;
        }

        std::size_t fuse_runs(sequential& s)
        {
            s.unfuse();
            const auto children = s.named_children();
            const auto at = [&](std::size_t k) { return k < children.size() ? children[k].second : nullptr; };
            std::size_t fused = 0;
            for (std::size_t i = 0; i < children.size(); ++i)
            {
                if (!exactly<relu>(at(i + 1)))
                    continue;
                const auto bn2 = exactly<batch_norm2d>(at(i));
                const auto pool = exactly<max_pool2d>(at(i + 2));
                if (bn2 && pool && pool->data_format() == bn2->options().data_format)
                {
                    s.fuse_children(i, 3, [bn2, params = pool->params()](const tensor& x) {
                        return bn2->forward_relu_max_pool(x, params);
                    });
                    i += 2;
                    ++fused;
                    continue;
                }
                std::shared_ptr<batch_norm_base> bn = bn2;
                if (!bn)
                    bn = exactly<batch_norm3d>(at(i));
                if (bn)
                {
                    s.fuse_children(i, 2, [bn](const tensor& x) { return bn->forward_relu(x); });
                    ++i;
                    ++fused;
                }
            }
            return fused;
        }
    }

    std::size_t fuse(module& m)
    {
        std::size_t fused = 0;
        if (auto* s = dynamic_cast<sequential*>(&m))
            fused += fuse_runs(*s);
        for (const auto& [name, child] : m.named_children())
            fused += fuse(*child);
        return fused;
    }
}
