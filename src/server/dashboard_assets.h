// The agents dashboard's static files (src/server/dashboard/), embedded in the binary at build
// time by dashboard/embed.cmake: no build step beyond CMake, nothing fetched by the page.
#pragma once

#include <span>
#include <string_view>

namespace akv {

struct DashboardAsset {
  std::string_view path;          // "/" for index.html, else "/dashboard/<file>"
  std::string_view content_type;
  std::string_view body;
};

std::span<const DashboardAsset> dashboard_assets();

}  // namespace akv
