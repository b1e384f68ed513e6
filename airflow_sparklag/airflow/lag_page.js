// The table's sparklines: drawn once the table is on screen, from `trends` (a job's lag at
// its newest checks), so reading those checks does not hold up the table. 120 x 24 px.
fetch("trends", {credentials: "same-origin"}).then(r => r.json()).then(trends => {
  for (const svg of document.querySelectorAll("svg.spark[data-job]")) {
    const p = trends[svg.dataset.job];
    if (!p || p.length < 2) continue;
    const t0 = p[0][0], span = (p[p.length - 1][0] - t0) || 1;
    const top = Math.max(...p.map(x => x[1])) || 1;
    const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
    line.setAttribute("class", "line");
    line.setAttribute("points", p.map(([t, v]) =>
      (1 + (t - t0) / span * 118).toFixed(1) + "," + (22 - v / top * 20).toFixed(1)).join(" "));
    svg.appendChild(line);
    svg.setAttribute("aria-label", "lag trend, " + p.length + " checks");
  }
});
