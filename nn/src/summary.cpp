// nn::summary: forward hooks on every descendant record the output shapes of one dry run.
#include "xgrad/nn/summary.hpp"

#include <algorithm>
#include <cstdint>
#include <iomanip>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "xgrad/autograd.hpp"

namespace xgrad::nn
{
    namespace
    {
        /// 1234567 -> "1,234,567"
        std::string grouped(std::int64_t n)
        {
            std::string digits = std::to_string(n), out;
            for (std::size_t i = 0; i < digits.size(); ++i)
            {
                if (i > 0 && (digits.size() - i) % 3 == 0)
                    out += ',';
                out += digits[i];
            }
            return out;
        }

        /// Removes the hooks it registered and restores the mode, however the run ends.
        class dry_run
        {
        public:
            dry_run(module& model, const module::named_modules_type& modules,
                    std::map<const module*, shape_type>& shapes)
                : m_model(model), m_modules(modules), m_training(model.is_training())
            {
                for (const auto& [name, m] : m_modules)
                    m_ids.push_back(m->register_forward_hook([&shapes](module& self, const tensor&, const tensor& y) {
                        shapes[&self] = y.shape();
                        return tensor();
                    }));
                m_model.eval();
            }
            ~dry_run()
            {
                for (std::size_t i = 0; i < m_ids.size(); ++i)
                    m_modules[i].second->remove_forward_hook(m_ids[i]);
                m_model.train(m_training);
            }
            dry_run(const dry_run&) = delete;
            dry_run& operator=(const dry_run&) = delete;

        private:
            module& m_model;
            const module::named_modules_type& m_modules;
            bool m_training;
            std::vector<std::int64_t> m_ids;
        };
    }

    std::string summary(module& model, const tensor& example_input)
    {
        const module::named_modules_type modules = model.named_modules();
        std::map<const module*, shape_type> shapes;
        tensor output;
        {
            dry_run run(model, modules, shapes);
            no_grad guard;
            output = model(example_input);
        }
        struct row
        {
            std::string layer, shape, params;
        };
        std::vector<row> rows;
        for (const auto& [name, m] : modules)
        {
            std::int64_t own = 0;
            for (const tensor& p : m->parameters(false))
                own += p.numel();
            const auto it = shapes.find(m.get());
            rows.push_back({name + " (" + std::string(m->type_name()) + ")",
                            it == shapes.end() ? "-" : shape_to_string(it->second), own ? grouped(own) : "-"});
        }
        std::int64_t total = 0, trainable = 0;
        for (const tensor& p : model.parameters())
        {
            total += p.numel();
            trainable += p.requires_grad() ? p.numel() : 0;
        }
        std::size_t w0 = 12, w1 = 12, w2 = 7;
        for (const row& r : rows)
        {
            w0 = std::max(w0, r.layer.size());
            w1 = std::max(w1, r.shape.size());
            w2 = std::max(w2, r.params.size());
        }
        const std::string rule(w0 + w1 + w2 + 4, '=');
        std::ostringstream s;
        s << std::left << std::setw(static_cast<int>(w0 + 2)) << "Layer (type)" << std::setw(static_cast<int>(w1 + 2))
          << "Output shape" << std::right << std::setw(static_cast<int>(w2)) << "Param #"
          << "\n"
          << rule << "\n";
        for (const row& r : rows)
            s << std::left << std::setw(static_cast<int>(w0 + 2)) << r.layer << std::setw(static_cast<int>(w1 + 2))
              << r.shape << std::right << std::setw(static_cast<int>(w2)) << r.params << "\n";
        s << rule << "\n"
          << "Input shape: " << shape_to_string(example_input.shape())
          << ", output shape: " << shape_to_string(output.shape()) << "\n"
          << "Total params: " << grouped(total) << "\n"
          << "Trainable params: " << grouped(trainable) << "\n"
          << "Non-trainable params: " << grouped(total - trainable);
        return s.str();
    }
}
