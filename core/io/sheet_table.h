#pragma once
// What the written forms of a sheet share (sheet.cpp, comparison.cpp): a table that is written as
// Markdown or HTML alike. Private to the io layer.

#include "headroom/sheet.h"

#include <cctype>
#include <string>
#include <vector>

namespace headroom::sheetparts {

struct Table
{
    std::string title;
    std::vector<std::string> header;
    std::vector<std::vector<std::string>> rows;
    // A column of numbers ("15.11 GiB", "+23.3%", "12") is right-aligned, text left-aligned.
    bool numeric(size_t col) const
    {
        bool any = false;
        for (const auto &r : rows) {
            if (col >= r.size() || r[col] == "-")
                continue;
            const std::string &c = r[col];
            const size_t i = !c.empty() && (c[0] == '+' || c[0] == '-') ? 1 : 0;
            if (i >= c.size() || !std::isdigit(static_cast<unsigned char>(c[i])))
                return false;
            any = true;
        }
        return any;
    }
};

// The comparison's tables (issue 31): the configuration's changes, both verdicts and the
// breakdown side by side with the difference per category.
std::vector<Table> comparisonTables(const Scenario &pinned, const Report &pinnedReport, const Scenario &current,
                                    const Report &currentReport, Unit units);

} // namespace headroom::sheetparts
