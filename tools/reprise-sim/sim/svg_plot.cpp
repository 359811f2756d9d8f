// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/svg_plot.hpp"

#include "sim/models.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace reprise::sim {

namespace {

constexpr const char* palette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000"};
constexpr const char* dashes[] = {"", "8 4", "2 3", "10 3 2 3", "4 4", "12 6", "1 2"};
constexpr int palette_size = 7;

std::string xml_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
    case '<': out += "&lt;"; break;
    case '>': out += "&gt;"; break;
    case '&': out += "&amp;"; break;
    case '"': out += "&quot;"; break;
    default:
      if (static_cast<unsigned char>(c) >= 0x20 || c == '\t') out += c;
    }
  }
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

} // namespace

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) hi = lo + 1;
  const double raw = (hi - lo) / std::max(target, 1);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  double step = mag;
  for (const double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) {
      step = m * mag;
      break;
    }
  std::vector<double> ticks;
  for (double t = std::ceil(lo / step - 1e-9) * step; t <= hi + step * 1e-9; t += step)
    ticks.push_back(std::fabs(t) < step * 1e-9 ? 0.0 : t);
  return ticks;
}

std::vector<double> pow2_ticks(double lo, double hi, int max_ticks) {
  const int a = static_cast<int>(std::ceil(std::log2(lo) - 1e-9));
  const int b = static_cast<int>(std::floor(std::log2(hi) + 1e-9));
  int stride = 1;
  while ((b - a) / stride + 1 > max_ticks) ++stride;
  std::vector<double> ticks;
  for (int e = a; e <= b; e += stride) ticks.push_back(std::ldexp(1.0, e));
  return ticks;
}

std::string format_tick(double v, axis_format f) {
  char buf[32];
  switch (f) {
  case axis_format::percent: std::snprintf(buf, sizeof buf, "%g%%", v); return buf;
  case axis_format::bytes: return format_bytes(v);
  case axis_format::number:
    if (std::fabs(v) >= 1e9) std::snprintf(buf, sizeof buf, "%gG", v / 1e9);
    else if (std::fabs(v) >= 1e6) std::snprintf(buf, sizeof buf, "%gM", v / 1e6);
    else if (std::fabs(v) >= 1e4) std::snprintf(buf, sizeof buf, "%gk", v / 1e3);
    else std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }
  return "";
}

std::string render_svg(const line_chart& c) {
  // The legend sits right of the plot, as wide as its longest entry (about 7.5 px per character at 13 px).
  std::size_t longest = 0;
  for (const series& s : c.lines) longest = std::max(longest, s.name.size());
  const double right = std::max(180.0, 70 + 7.5 * static_cast<double>(longest));
  const double width = 660 + right, height = 540;
  constexpr double left = 90;
  const double top = 70 + 16.0 * static_cast<double>(std::count(c.subtitle.begin(), c.subtitle.end(), '\n'));
  const double bottom = 70 + 18.0 * static_cast<double>(c.notes.size());
  const double pw = width - left - right, ph = height - top - bottom;

  // Data ranges, ignoring NaNs (and non-positive x on a log axis).
  double x_lo = std::numeric_limits<double>::infinity(), x_hi = -x_lo, y_lo = x_lo, y_hi = -x_lo;
  for (const series& s : c.lines)
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || (c.x_log && s.x[i] <= 0)) continue;
      x_lo = std::min(x_lo, s.x[i]);
      x_hi = std::max(x_hi, s.x[i]);
      if (!std::isfinite(s.y[i])) continue;
      y_lo = std::min(y_lo, s.y[i]);
      y_hi = std::max(y_hi, s.y[i]);
    }
  if (!std::isfinite(x_lo)) x_lo = 1, x_hi = 2;
  if (!std::isfinite(y_lo)) y_lo = 0, y_hi = 1;
  if (c.y_min) y_lo = *c.y_min;
  else y_lo = std::min(y_lo, 0.0); // counts and rates read best from zero
  if (c.y_max) y_hi = *c.y_max;
  if (!(y_hi > y_lo)) y_hi = y_lo + 1;
  if (!(x_hi > x_lo)) {
    if (c.x_log) x_lo /= 2, x_hi *= 2;
    else x_lo -= 1, x_hi += 1;
  }
  std::vector<double> y_ticks = nice_ticks(y_lo, y_hi);
  if (!c.y_max) y_hi = std::max(y_hi, y_ticks.back());
  std::vector<double> x_ticks = c.x_log ? pow2_ticks(x_lo, x_hi) : nice_ticks(x_lo, x_hi);

  auto fx = [&](double x) {
    const double t = c.x_log ? (std::log2(x) - std::log2(x_lo)) / (std::log2(x_hi) - std::log2(x_lo))
                             : (x - x_lo) / (x_hi - x_lo);
    return left + t * pw;
  };
  auto fy = [&](double y) { return top + ph - (y - y_lo) / (y_hi - y_lo) * ph; };

  std::string o;
  o += "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(width) + "\" height=\"" + num(height) +
       "\" viewBox=\"0 0 " + num(width) + " " + num(height) + "\" font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  o += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  o += "<text x=\"" + num(left) + "\" y=\"30\" font-size=\"18\" font-weight=\"bold\">" + xml_escape(c.title) + "</text>\n";
  double sub_y = 50;
  for (std::size_t from = 0; from < c.subtitle.size();) {
    std::size_t nl = c.subtitle.find('\n', from);
    if (nl == std::string::npos) nl = c.subtitle.size();
    o += "<text x=\"" + num(left) + "\" y=\"" + num(sub_y) + "\" font-size=\"12\" fill=\"#444444\">" +
         xml_escape(c.subtitle.substr(from, nl - from)) + "</text>\n";
    sub_y += 16;
    from = nl + 1;
  }
  for (std::size_t i = 0; i < c.notes.size(); ++i)
    o += "<text x=\"" + num(left) + "\" y=\"" + num(height - 18.0 * static_cast<double>(c.notes.size() - i) + 4) +
         "\" font-size=\"12\" fill=\"#a00000\">" + xml_escape(c.notes[i]) + "</text>\n";

  // Grid and ticks.
  for (const double t : y_ticks) {
    if (t < y_lo - 1e-9 || t > y_hi + 1e-9) continue;
    const double y = fy(t);
    o += "<line x1=\"" + num(left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(left + pw) + "\" y2=\"" + num(y) +
         "\" stroke=\"#e0e0e0\"/>\n";
    o += "<text x=\"" + num(left - 8) + "\" y=\"" + num(y + 4) + "\" font-size=\"12\" text-anchor=\"end\">" +
         xml_escape(format_tick(t, c.y_format)) + "</text>\n";
  }
  for (const double t : x_ticks) {
    const double x = fx(t);
    o += "<line x1=\"" + num(x) + "\" y1=\"" + num(top) + "\" x2=\"" + num(x) + "\" y2=\"" + num(top + ph) +
         "\" stroke=\"#e0e0e0\"/>\n";
    o += "<line x1=\"" + num(x) + "\" y1=\"" + num(top + ph) + "\" x2=\"" + num(x) + "\" y2=\"" + num(top + ph + 5) +
         "\" stroke=\"black\"/>\n";
    o += "<text x=\"" + num(x) + "\" y=\"" + num(top + ph + 20) + "\" font-size=\"12\" text-anchor=\"middle\">" +
         xml_escape(format_tick(t, c.x_format)) + "</text>\n";
  }
  o += "<rect x=\"" + num(left) + "\" y=\"" + num(top) + "\" width=\"" + num(pw) + "\" height=\"" + num(ph) +
       "\" fill=\"none\" stroke=\"black\"/>\n";
  o += "<text x=\"" + num(left + pw / 2) + "\" y=\"" + num(top + ph + 45) +
       "\" font-size=\"14\" text-anchor=\"middle\">" + xml_escape(c.x_label) + "</text>\n";
  o += "<text transform=\"translate(22," + num(top + ph / 2) + ") rotate(-90)\" font-size=\"14\" text-anchor=\"middle\">" +
       xml_escape(c.y_label) + "</text>\n";

  // Lines, markers and legend.
  for (std::size_t k = 0; k < c.lines.size(); ++k) {
    const series& s = c.lines[k];
    const char* colour = palette[k % palette_size];
    const char* dash = dashes[k % palette_size];
    std::string path;
    bool pen_down = false;
    std::string markers;
    for (std::size_t i = 0; i < std::min(s.x.size(), s.y.size()); ++i) {
      if (!std::isfinite(s.x[i]) || !std::isfinite(s.y[i]) || (c.x_log && s.x[i] <= 0)) {
        pen_down = false;
        continue;
      }
      const double y = std::clamp(s.y[i], y_lo, y_hi);
      path += (pen_down ? " L" : " M") + num(fx(s.x[i])) + " " + num(fy(y));
      pen_down = true;
      markers += "<circle cx=\"" + num(fx(s.x[i])) + "\" cy=\"" + num(fy(y)) + "\" r=\"3.5\" fill=\"" + colour + "\"/>\n";
    }
    if (!path.empty())
      o += "<path d=\"" + path.substr(1) + "\" fill=\"none\" stroke=\"" + colour + "\" stroke-width=\"2.5\"" +
           (*dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : std::string()) + "/>\n";
    o += markers;
    const double ly = top + 10 + 24.0 * static_cast<double>(k);
    const double lx = left + pw + 20;
    o += "<line x1=\"" + num(lx) + "\" y1=\"" + num(ly) + "\" x2=\"" + num(lx + 30) + "\" y2=\"" + num(ly) +
         "\" stroke=\"" + colour + "\" stroke-width=\"2.5\"" +
         (*dash ? std::string(" stroke-dasharray=\"") + dash + "\"" : std::string()) + "/>\n";
    o += "<circle cx=\"" + num(lx + 15) + "\" cy=\"" + num(ly) + "\" r=\"3.5\" fill=\"" + colour + "\"/>\n";
    o += "<text x=\"" + num(lx + 38) + "\" y=\"" + num(ly + 4) + "\" font-size=\"13\">" + xml_escape(s.name) + "</text>\n";
  }
  o += "</svg>\n";
  return o;
}

} // namespace reprise::sim
