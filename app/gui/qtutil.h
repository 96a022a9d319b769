#pragma once

#include <QString>

#include <string>
#include <string_view>

inline QString qs(std::string_view s)
{
    return QString::fromUtf8(s.data(), static_cast<qsizetype>(s.size()));
}
