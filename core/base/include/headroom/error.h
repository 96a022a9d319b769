#pragma once

#include <stdexcept>
#include <string>

namespace headroom {

// Bad user input: a config file, a flag, a sheet or a probe result. The message always
// names the field and the offending value, so the CLI and GUI can show it as is.
// One line, always: control characters in the field or value are escaped (\n, \x1b...) and a
// value longer than 200 characters is cut, so a hostile file cannot spread a message over lines.
std::string oneLineValue(const std::string &s, size_t limit = 200);
// A name read from a file (a GPU, a device, a model): one line and at most `limit` characters, so
// a hostile 1 MB name can neither break a message nor widen a window (issue 15).
inline std::string boundedName(const std::string &s, size_t limit = 120) { return oneLineValue(s, limit); }

class InputError : public std::runtime_error
{
public:
    InputError(std::string field, std::string value, const std::string &why)
        : std::runtime_error(oneLineValue(field) + " = " + oneLineValue(value) + ": " + oneLineValue(why, 2000))
        , m_field(std::move(field))
        , m_value(std::move(value))
        , m_why(why)
    {
    }
    const std::string &field() const { return m_field; }
    const std::string &value() const { return m_value; }
    const std::string &why() const { return m_why; }

private:
    std::string m_field;
    std::string m_value;
    std::string m_why;
};

// Byte arithmetic that refuses to wrap: every size in the estimator goes through these.
int64_t checkedMul(int64_t a, int64_t b);
int64_t checkedAdd(int64_t a, int64_t b);

} // namespace headroom
