#pragma once
#include "headroom/hub.h"

namespace headroom {
// One GET through libcurl, as hub::resolve wants it.
hub::Fetch curlFetch();
} // namespace headroom
