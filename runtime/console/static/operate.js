// The operator page's live view, written here with no library: the server's metrics read every
// 2 s (/console/operate/live: cumulative counts and histogram buckets), turned into the last
// interval's request rate, server errors, and p50/p99 of request time and first-token time, and
// the rate of the last 5 minutes drawn as a line.
"use strict";

(function () {
  const root = document.getElementById("live");
  if (!root) return;
  const chart = document.getElementById("live-chart");
  const EVERY_MS = 2000, KEPT = 150, SVG = "http://www.w3.org/2000/svg";
  const rates = [];
  let last = null;

  // The value under which `share` of the interval's observations fall, from the difference of two
  // cumulative bucket lists, interpolated linearly inside its bucket (as Prometheus does).
  function quantile(now, before, share) {
    const counts = now.map(([bound, count], at) => [bound, count - (before[at] ? before[at][1] : 0)]);
    const total = counts.length ? counts[counts.length - 1][1] : 0;
    if (total <= 0) return null;
    const rank = total * share;
    let lower = 0, below = 0;
    for (const [bound, count] of counts) {
      if (count >= rank) {
        if (bound === null) return "> " + format(lower);
        return format(lower + (bound - lower) * ((rank - below) / Math.max(count - below, 1)));
      }
      if (bound !== null) lower = bound;
      below = count;
    }
    return null;
  }

  function format(seconds) {
    return seconds < 1 ? (seconds * 1000).toFixed(seconds < 0.01 ? 2 : 1) + " ms" : seconds.toFixed(2) + " s";
  }

  function show(id, text) { document.getElementById(id).textContent = text === null ? "–" : text; }

  function draw() {
    while (chart.firstChild) chart.removeChild(chart.firstChild);
    const top = Math.max(1, ...rates);
    const points = rates.map((rate, at) => (720 * at / (KEPT - 1)).toFixed(1) + "," + (115 - 105 * rate / top).toFixed(1)).join(" ");
    const line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", points); line.setAttribute("fill", "none"); line.setAttribute("stroke", "#0b5cad");
    line.setAttribute("stroke-width", "1.5");
    const label = document.createElementNS(SVG, "text");
    label.setAttribute("x", "4"); label.setAttribute("y", "12"); label.setAttribute("font-size", "11"); label.setAttribute("fill", "#5f6b76");
    label.textContent = top.toFixed(1) + " requests/s";
    chart.appendChild(line); chart.appendChild(label);
  }

  async function sample() {
    let now;
    try {
      const response = await fetch("/console/operate/live", { credentials: "same-origin" });
      if (!response.ok) return;
      now = await response.json();
    } catch (error) { return; }
    if (last !== null && now.t > last.t) {
      const seconds = now.t - last.t;
      const rate = Math.max(0, now.requests - last.requests) / seconds;
      rates.push(rate);
      if (rates.length > KEPT) rates.shift();
      show("live-rate", rate.toFixed(1));
      show("live-errors", String(Math.max(0, now.server_errors - last.server_errors)));
      show("live-p50", quantile(now.duration, last.duration, 0.5));
      show("live-p99", quantile(now.duration, last.duration, 0.99));
      show("live-ttft50", quantile(now.first_token, last.first_token, 0.5));
      show("live-ttft99", quantile(now.first_token, last.first_token, 0.99));
      draw();
    }
    last = now;
  }

  sample();
  setInterval(sample, EVERY_MS);
})();
