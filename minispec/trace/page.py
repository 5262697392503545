"""A trace as a self-contained HTML page: no network, no framework; inline CSS and a little JavaScript.

The page holds the trace's JSON (``Trace.to_json``) and draws from it: a header with the run's figures, the
text as coloured chips (one row per round; hover or click a chip for p(x), q(x), min(1, p/q) and the draw that
decided it, and, after a rejection, the residual's most likely tokens), and a chart of acceptance by position.
It reads at a laptop's width and prints. When it has drawn, ``<html data-rendered="ok">``; a script error sets
``data-script-error`` (the browser test reads both).
"""

from __future__ import annotations

import html
import json

STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; margin: 1.5rem auto; max-width: 62rem; padding: 0 1rem; color: #222; }
h1 { font-size: 1.3rem; margin: 0 0 .5rem; }
.figures { display: flex; flex-wrap: wrap; gap: .4rem 1.4rem; margin: .5rem 0 1rem; }
.figures b { font-variant-numeric: tabular-nums; }
.legend span { margin-right: 1rem; }
.round { display: flex; align-items: baseline; gap: .5rem; border-top: 1px solid #eee; padding: .15rem 0; }
.round .n { color: #999; font: 12px monospace; min-width: 2.5rem; text-align: right; }
.chips { font-family: ui-monospace, monospace; white-space: pre-wrap; }
.chip { border-radius: 3px; padding: 0 1px; cursor: pointer; }
.kept { background: #c8f0c8; } .correction { background: #ffc9c0; } .bonus { background: #c9dcff; }
.plain { background: #eee; }
#detail { position: sticky; bottom: 0; background: #fffbe6; border: 1px solid #e6d98c; padding: .4rem .6rem;
  font: 13px monospace; min-height: 2.5rem; margin-top: 1rem; white-space: pre-wrap; }
svg text { font: 11px sans-serif; }
@media print { #detail { display: none; } .chip { -webkit-print-color-adjust: exact; print-color-adjust: exact; } }
"""

SCRIPT = r"""
window.onerror = function (msg) { document.documentElement.dataset.scriptError = String(msg); };
(function () {
  const data = JSON.parse(document.getElementById('trace-data').textContent);
  const s = data.summary, fmt = (x, d) => (x === null || x === undefined) ? '-' : Number(x).toFixed(d);
  const show = (t) => t === null || t === undefined ? '?' : JSON.stringify(t);
  const threshold = (rule) => rule === 'block' ? 'h' : rule === 'token' ? 'min(1, p/q)' : 'threshold';
  const fig = document.getElementById('figures');
  const items = [['tokens', s.tokens], ['target passes', s.target_passes],
                 ['tokens per pass', fmt(s.tokens / Math.max(1, s.target_passes), 2)],
                 ['drafter', s.drafter || '-'], ['rule', s.rule || '-'],
                 ['speed model predicts', s.predicted_speedup ? fmt(s.predicted_speedup, 2) + 'x' : '-'],
                 ['measured', s.measured_speedup ? fmt(s.measured_speedup, 2) + 'x' : '-']];
  for (const [k, v] of items) { const e = document.createElement('span'); e.innerHTML = k + ' <b></b>';
    e.querySelector('b').textContent = v; fig.appendChild(e); }
  const detail = document.getElementById('detail'), rows = document.getElementById('rounds');
  data.rounds.forEach(function (r, i) {
    const row = document.createElement('div'); row.className = 'round'; row.dataset.k = r.k;
    row.dataset.accepted = r.accepted; row.innerHTML = '<span class="n"></span><span class="chips"></span>';
    row.querySelector('.n').textContent = (i + 1) + ' K' + r.k;
    const chips = row.querySelector('.chips');
    r.emitted.forEach(function (t, j) {
      const c = document.createElement('span'); c.className = 'chip ' + r.kinds[j]; c.dataset.kind = r.kinds[j];
      c.textContent = r.emitted_text[j] === null ? ('<' + t + '>') : r.emitted_text[j];
      let info = 'round ' + (i + 1) + ', token ' + (j + 1) + ': ' + r.kinds[j] + ' ' + show(r.emitted_text[j]);
      const coupled = r.rule === 'coupled';
      if (j < r.k && r.p.length) info += '\n  guess ' + show(r.guess_text[j]) + '  p(x) = ' + fmt(r.p[j], 4) +
        '  q(x) = ' + fmt(r.q[j], 4) + (coupled ? '  the target\'s keyed sample: ' + show(r.samples_text[j]) :
        '  ' + threshold(r.rule) + ' = ' + fmt(r.accept[j], 4) + '  draw = ' + fmt(r.draws[j], 4));
      if (r.kinds[j] === 'correction' && coupled) {
        const j0 = r.accepted;
        info += '\n  rejected ' + show(r.guess_text[j0]) + ': not the target\'s keyed sample ' + show(r.samples_text[j0]) +
          ', which is emitted (no residual: the rule never reads q)';
      } else if (r.kinds[j] === 'correction') {
        const j0 = r.accepted;
        if (j0 < r.p.length) info += '\n  rejected ' + show(r.guess_text[j0]) + ': p = ' + fmt(r.p[j0], 4) + ', q = ' +
          fmt(r.q[j0], 4) + ', draw ' + fmt(r.draws[j0], 4) + (r.rule === 'token' ? ' >= ' + fmt(r.accept[j0], 4) : '');
        info += '\n  residual: ' + (r.rule === 'undeclared' ? 'not shown: the rule does not declare which it draws from' :
          r.residual_top.map(x => show(x.text) + ' ' + fmt(x.mass, 3)).join(', '));
      }
      if (r.kinds[j] === 'bonus') info += coupled ? '\n  every guess kept: the target\'s keyed sample at the next position' :
        '\n  every guess kept: drawn from p_{K+1}';
      info += '\n  round: drafting ' + fmt(1e3 * r.t_draft, 1) + ' ms, target pass ' + fmt(1e3 * r.t_verify, 1) + ' ms';
      c.title = info;
      c.onmouseenter = c.onclick = function () { detail.textContent = info; };
      chips.appendChild(c);
    });
    rows.appendChild(row);
  });
  const acc = s.acceptance_by_position || [], svg = document.getElementById('chart'), W = 28, H = 80;
  svg.setAttribute('width', 40 + acc.length * W); svg.setAttribute('height', H + 30);
  acc.forEach(function (a, j) {
    const h = (a || 0) * H, x = 30 + j * W;
    svg.insertAdjacentHTML('beforeend', '<rect x="' + x + '" y="' + (H - h + 5) + '" width="' + (W - 6) +
      '" height="' + h + '" fill="#7bc47b"></rect><text x="' + x + '" y="' + (H + 20) + '">' + (j + 1) +
      '</text><text x="' + x + '" y="' + (H - h) + '">' + fmt(a, 2) + '</text>');
  });
  document.documentElement.dataset.rendered = 'ok';
})();
"""


def html_page(data: dict, title: str = "minispec trace") -> str:
    """The page for ``data`` (``Trace.to_json``)."""
    payload = json.dumps(data).replace("<", "\\u003c")  # no "<" at all, so the JSON can neither close its script
    # element nor open a comment in it (bug: only "</" was escaped, and "<!-- <script>" in a prompt broke the page)
    title = html.escape(title)  # (bug: inserted as it was; it names the drafter or a directory)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><style>{STYLE}</style></head>
<body>
<h1>{title}</h1>
<div class="figures" id="figures"></div>
<div class="legend"><span class="chip kept">kept guess</span><span class="chip correction">correction: after a
rejection, from the residual</span><span class="chip bonus">bonus: every guess kept, from p<sub>K+1</sub></span><span
class="chip plain">a plain round</span></div>
<p>One row per round (one target pass). Hover or click a token for what the rule saw.</p>
<div id="rounds"></div>
<h2 style="font-size:1rem">Acceptance by position in the round</h2>
<svg id="chart" role="img" aria-label="acceptance by position"></svg>
<div id="detail">Hover or click a token.</div>
<script type="application/json" id="trace-data">{payload}</script>
<script>{SCRIPT}</script>
</body></html>
"""
