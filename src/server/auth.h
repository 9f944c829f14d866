#pragma once
// --api-key: requests must carry "Authorization: Bearer <key>".
#include <string>
#include <string_view>

namespace rs::server {

// Compares in time that depends only on the lengths, never on where the first difference is,
// so a client cannot find the key byte by byte by timing the 401s.
bool constant_time_equal(std::string_view a, std::string_view b);

// True when no key is configured, or the header is "Bearer <key>" with the right key.
bool authorized(const std::string& api_key, const std::string& authorization_header);

}  // namespace rs::server
