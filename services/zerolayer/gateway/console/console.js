// zerolayer console: a page per hash route, drawn from the platform's own API with the key the
// user signed in with. No framework, no network reference but this server; every value from the
// API is set as text (never parsed as HTML).

const KEY = "zerolayer.console.key";
const state = { key: null, admin: false, account: null };

// ---- small helpers ------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

const SVG = "http://www.w3.org/2000/svg";
function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v !== null && v !== undefined) node.setAttribute(k, String(v));
  }
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}

function say(text) {
  document.getElementById("status").textContent = text;
}

function pct(x, digits = 1) {
  return x === null || x === undefined ? "–" : `${(x * 100).toFixed(digits)}%`;
}

function signed(x, digits = 2) {
  if (x === null || x === undefined) return "–";
  return `${x > 0 ? "+" : ""}${(x * 100).toFixed(digits)}%`;
}

class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || `HTTP ${status}`);
    this.status = status;
    this.code = err.code;
  }
}

async function api(path, options = {}) {
  const headers = { Authorization: `Bearer ${state.key}`, ...(options.headers || {}) };
  if (options.body !== undefined) headers["Content-Type"] = "application/json";
  const resp = await fetch(path, {
    ...options,
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
    cache: "no-store",
  });
  const type = resp.headers.get("content-type") || "";
  const body = type.includes("json") ? await resp.json() : await resp.text();
  if (!resp.ok) throw new ApiError(resp.status, body);
  return body;
}

// ---- sign-in ------------------------------------------------------------------------------

async function whoIs(key) {
  // an API key's account, else the admin key's; a key neither accepts is refused
  state.key = key;
  try {
    return { admin: false, account: await api("/v1/account") };
  } catch (err) {
    if (err.status !== 401) throw err;
  }
  try {
    await api("/admin/account");
    return { admin: true, account: null };
  } catch (err) {
    if (err.status === 401 || err.status === 403) {
      throw new ApiError(401, { error: { message: "this key is unknown, revoked or not the admin key" } });
    }
    throw err;
  }
}

async function signIn(key) {
  const who = await whoIs(key);
  sessionStorage.setItem(KEY, key);
  state.admin = who.admin;
  state.account = who.account;
  showChrome();
}

function signOut() {
  sessionStorage.removeItem(KEY);
  Object.assign(state, { key: null, admin: false, account: null });
  showChrome();
  route();
}

function showChrome() {
  const signedIn = Boolean(state.account || state.admin);
  document.getElementById("nav").hidden = !signedIn;
  document.getElementById("who").hidden = !signedIn;
  document.getElementById("sign-in").hidden = signedIn;
  for (const a of document.querySelectorAll("#nav [data-customer]")) a.parentElement.hidden = state.admin;
  for (const a of document.querySelectorAll("#nav [data-admin]")) a.parentElement.hidden = !state.admin;
  const who = state.admin
    ? "admin"
    : state.account
      ? `${state.account.key.name || state.account.key.key_id} · plan ${state.account.plan.name}`
      : "";
  document.getElementById("who-text").textContent = who;
}

function setupSignIn() {
  const form = document.getElementById("sign-in-form");
  const error = document.getElementById("sign-in-error");
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    error.textContent = "";
    const input = document.getElementById("key");
    const key = input.value.trim();
    try {
      await signIn(key);
      input.value = "";
      route();
    } catch (err) {
      state.key = null;
      error.textContent = `Sign-in refused: ${err.message}`;
      input.focus();
    }
  });
  document.getElementById("sign-out").addEventListener("click", signOut);
}

// ---- charts -------------------------------------------------------------------------------

const PALETTE = ["#0b6e5b", "#c2410c", "#6d28d9", "#0369a1", "#a16207", "#be123c", "#4d7c0f"];

function ticks(lo, hi, n = 4) {
  if (!(hi > lo)) return [lo];
  const step = (hi - lo) / n;
  return Array.from({ length: n + 1 }, (_, i) => lo + i * step);
}

function scatter({ points, xLabel, yLabel, xFormat, yFormat, title }) {
  // points: [{x, y, label, colour}]; a zero line for y when the range spans it
  const W = 420, H = 260, L = 58, R = 16, T = 14, B = 42;
  const xs = points.map((p) => p.x), ys = points.map((p) => p.y);
  let [x0, x1] = [Math.min(...xs), Math.max(...xs)];
  let [y0, y1] = [Math.min(0, ...ys), Math.max(0, ...ys)];
  if (x1 === x0) { x0 -= 1; x1 += 1; }
  if (y1 === y0) { y0 -= 0.01; y1 += 0.01; }
  const padX = (x1 - x0) * 0.12, padY = (y1 - y0) * 0.15;
  x0 -= padX; x1 += padX; y0 -= padY; y1 += padY;
  const sx = (x) => L + ((x - x0) / (x1 - x0)) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const parts = [];
  for (const t of ticks(x0 + padX, x1 - padX)) {
    parts.push(svg("line", { x1: sx(t), x2: sx(t), y1: T, y2: H - B, stroke: "#eef1f4" }));
    parts.push(svg("text", { x: sx(t), y: H - B + 14, "text-anchor": "middle" }, xFormat(t)));
  }
  for (const t of ticks(y0 + padY, y1 - padY)) {
    parts.push(svg("line", { x1: L, x2: W - R, y1: sy(t), y2: sy(t), stroke: "#eef1f4" }));
    parts.push(svg("text", { x: L - 6, y: sy(t) + 4, "text-anchor": "end" }, yFormat(t)));
  }
  if (y0 < 0 && y1 > 0) {
    parts.push(svg("line", { x1: L, x2: W - R, y1: sy(0), y2: sy(0), stroke: "#98a4b0", "stroke-dasharray": "4 3" }));
  }
  parts.push(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#98a4b0" }));
  parts.push(svg("line", { x1: L, x2: L, y1: T, y2: H - B, stroke: "#98a4b0" }));
  parts.push(svg("text", { x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle" }, xLabel));
  parts.push(svg("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle",
    transform: `rotate(-90 12 ${(T + H - B) / 2})` }, yLabel));
  const taken = new Map(); // points drawn at one spot get their labels one under another
  for (const p of points) {
    const spot = `${Math.round(sx(p.x) / 8)},${Math.round(sy(p.y) / 8)}`;
    const n = taken.get(spot) || 0;
    taken.set(spot, n + 1);
    const right = sx(p.x) > L + (W - L - R) * 0.7; // near the right edge: label on the left
    const g = svg("g", {},
      svg("circle", { class: "point", cx: sx(p.x), cy: sy(p.y), r: 6, fill: p.colour }),
      svg("text", { class: "label", x: sx(p.x) + (right ? -9 : 9), y: sy(p.y) - 7 + n * 13,
        "text-anchor": right ? "end" : "start" }, p.label),
      svg("title", {}, `${p.label}: ${xLabel} ${xFormat(p.x)}, ${yLabel} ${yFormat(p.y)}`));
    parts.push(g);
  }
  const desc = points.map((p) => `${p.label}: ${xFormat(p.x)}, ${yFormat(p.y)}`).join("; ");
  return svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img",
    "aria-label": `${title}. ${desc}` }, parts);
}

function lineChart({ series, xLabel, yLabel, yFormat, title, height = 220 }) {
  // series: [{values: [number|null], label, colour, dash}] over the same x (0..n-1)
  const W = 720, H = height, L = 58, R = 16, T = 12, B = 36;
  const all = series.flatMap((s) => s.values).filter((v) => v !== null && v !== undefined);
  const n = Math.max(...series.map((s) => s.values.length), 2);
  let y0 = Math.min(0, ...all), y1 = Math.max(...all, 1e-9);
  if (y1 === y0) y1 = y0 + 1;
  const sx = (i) => L + (i / (n - 1)) * (W - L - R);
  const sy = (y) => T + (1 - (y - y0) / (y1 - y0)) * (H - T - B);
  const parts = [];
  for (const t of ticks(y0, y1)) {
    parts.push(svg("line", { x1: L, x2: W - R, y1: sy(t), y2: sy(t), stroke: "#eef1f4" }));
    parts.push(svg("text", { x: L - 6, y: sy(t) + 4, "text-anchor": "end" }, yFormat(t)));
  }
  for (const t of ticks(0, n - 1, Math.min(6, n - 1))) {
    const i = Math.round(t);
    parts.push(svg("text", { x: sx(i), y: H - B + 14, "text-anchor": "middle" }, String(i)));
  }
  parts.push(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#98a4b0" }));
  parts.push(svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle" }, xLabel));
  parts.push(svg("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle",
    transform: `rotate(-90 12 ${(T + H - B) / 2})` }, yLabel));
  series.forEach((s) => {
    let d = "";
    s.values.forEach((v, i) => {
      if (v === null || v === undefined) return;
      d += `${d && s.values[i - 1] !== null && s.values[i - 1] !== undefined ? "L" : "M"}${sx(i).toFixed(1)},${sy(v).toFixed(1)}`;
    });
    parts.push(svg("path", { d, fill: "none", stroke: s.colour, "stroke-width": 2,
      "stroke-dasharray": s.dash || null }));
    if (s.values.length <= 64) {
      s.values.forEach((v, i) => {
        if (v !== null && v !== undefined) {
          parts.push(svg("circle", { cx: sx(i), cy: sy(v), r: 2.5, fill: s.colour }));
        }
      });
    }
  });
  return svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": title }, parts);
}

// ---- models -------------------------------------------------------------------------------

function statusBadge(m) {
  const s = m.status || "ready";
  let text = s;
  if (s === "building") text = `building${m.progress !== null && m.progress !== undefined ? ` ${pct(m.progress, 0)}` : ""}`;
  return el("span", { class: `badge ${s}` }, text);
}

function qualityOf(m) {
  const q = m.tier_card && m.tier_card.quality;
  return q ? q.ppl_delta : null;
}

function flipsText(f) {
  // the share of held-out answers whose first tokens differ from dense, on the worst domain
  if (!f || f.flips === undefined) return "not measured";
  return f.worst_domain ? `${pct(f.flips)} (worst: ${f.worst_domain})` : pct(f.flips);
}

function priceBasis(p) {
  // where a price comes from: the tier's measured cost (auto), or not measured yet
  if (p.basis === "auto") return " (cost-based)";
  if (p.basis === "unmeasured") return ` (as ${p.priced_as} until measured)`;
  return "";
}

function costText(c) {
  // what serving a million output tokens costs, measured on a hardware class on a date
  if (!c || !c.completion) return "not measured";
  const day = c.measured ? c.measured.slice(0, 10) : "";
  return `$${c.completion} on ${c.hardware_class}${day ? `, ${day}` : ""}${c.stale ? " (earlier artifact)" : ""}`;
}

function tierCard(m) {
  const card = m.tier_card || {};
  const serving = card.serving || {};
  const q = card.quality || {};
  const price = m.pricing;
  const rows = [
    ["Quality change", q.ppl_delta === undefined ? "–" : `${signed(q.ppl_delta)} perplexity`,
      q.ppl_delta > 0.0001 ? "worse" : q.ppl_delta < -0.0001 ? "better" : null],
    ["KL vs dense", q.kl === undefined ? "–" : q.kl.toFixed(4)],
    ["Answers changed", flipsText(card.flips)],
    ["Compute removed", m.compute_removed ? pct(m.compute_removed.share) : "–"],
    ["Engine", `${m.engine}${serving.device ? ` on ${serving.device}` : ""}`],
    ["2:4 sparse cores", serving.hardware_sparsity ? "active" : "off"],
    ["CPU offload", serving.offload ? "on" : "off"],
    ["Build", m.status || "ready"],
    ["Speed", m.speed && m.speed.tokens_per_s ? `${m.speed.tokens_per_s.toFixed(1)} tokens/s` : "not measured yet"],
    ["Cost / 1M out", costText(m.cost_per_1m_tokens)],
    ["Price / 1M in", price ? `$${price.prompt_per_1m}` : state.admin ? "per plan" : "not in your plan"],
    ["Price / 1M out", price ? `$${price.completion_per_1m}${priceBasis(price)}` : "–"],
    ["Context", `${m.context_length || m.max_model_len} tokens`],
  ];
  const what = m.compute_removed ? m.compute_removed.of : "";
  return el("article", { class: "card", "data-tier": m.tier, "aria-labelledby": `card-${m.tier}` },
    // a line may break after the model's name, never inside a word
    el("h3", { id: `card-${m.tier}` }, el("span", {}, `${m.root}:`, el("wbr"), m.tier), statusBadge(m)),
    el("dl", {}, rows.map(([k, v, cls]) => [el("dt", {}, k), el("dd", { class: cls || null,
      title: k === "Compute removed" ? what : null }, v)])),
    card.method ? el("p", { class: "note" }, card.method) : null);
}

function spread(values) {
  // decimals a percentage axis needs to tell its ticks apart
  const range = Math.max(...values) - Math.min(...values);
  return range >= 0.2 ? 0 : range >= 0.02 ? 1 : 2;
}

function qualityCharts(model, tiers) {
  const colour = (i) => PALETTE[i % PALETTE.length];
  const withQ = tiers.map((m, i) => ({ m, i })).filter(({ m }) => qualityOf(m) !== null);
  const fmtQ = (v) => `${v > 0 ? "+" : ""}${(v * 100).toFixed(1)}%`;
  const charts = [];
  const speed = withQ.filter(({ m }) => m.speed && m.speed.tokens_per_s);
  if (speed.length) {
    charts.push(el("figure", {}, el("figcaption", {}, "Quality change against measured speed"),
      scatter({ title: `${model}: perplexity change against output tokens per second`,
        points: speed.map(({ m, i }) => ({ x: m.speed.tokens_per_s, y: qualityOf(m), label: m.tier, colour: colour(i) })),
        xLabel: "output tokens/s (measured)", yLabel: "perplexity change",
        xFormat: (v) => v.toFixed(0), yFormat: fmtQ })));
  }
  const compute = withQ.filter(({ m }) => m.compute_removed);
  if (compute.length) {
    charts.push(el("figure", {}, el("figcaption", {}, "Quality change against compute removed"),
      scatter({ title: `${model}: perplexity change against the share of compute removed`,
        points: compute.map(({ m, i }) => ({ x: m.compute_removed.share, y: qualityOf(m), label: m.tier, colour: colour(i) })),
        xLabel: "compute removed", yLabel: "perplexity change",
        xFormat: (v) => pct(v, spread(compute.map(({ m }) => m.compute_removed.share))), yFormat: fmtQ })));
  }
  const priced = withQ.filter(({ m }) => m.pricing);
  if (priced.length) {
    charts.push(el("figure", {}, el("figcaption", {}, "Quality change against price"),
      scatter({ title: `${model}: perplexity change against the price of 1M output tokens`,
        points: priced.map(({ m, i }) => ({ x: Number(m.pricing.completion_per_1m), y: qualityOf(m), label: m.tier, colour: colour(i) })),
        xLabel: "USD per 1M output tokens (your plan)", yLabel: "perplexity change",
        xFormat: (v) => `$${v.toFixed(4)}`, yFormat: fmtQ })));
  }
  if (!charts.length) return el("p", { class: "note" }, "No tier has a measured card yet.");
  return el("div", { class: "charts" }, charts);
}

async function viewModels(view) {
  const { data } = await api("/v1/models");
  const models = data.filter((m) => !m.tier);
  view.append(el("h1", {}, "Models"));
  if (!state.admin) {
    const a = state.account;
    view.append(el("p", { class: "note" },
      `Plan ${a.plan.name}: tiers ${a.plan.tiers.join(", ")}; a bare model id goes to ${a.plan.default_tier}.`));
  }
  for (const model of models) {
    const tiers = data.filter((m) => m.root === model.id);
    view.append(el("section", { "aria-labelledby": `model-${model.id}` },
      el("h2", { id: `model-${model.id}` }, model.id),
      model.description ? el("p", {}, model.description) : null,
      el("div", { class: "panel" }, qualityCharts(model.id, tiers),
        el("p", { class: "note" }, "Quality change: perplexity against the dense model on the held-out evaluation text (lower is better). ",
          el("a", { href: `#/silence/${encodeURIComponent(model.id)}` }, "Silence map of this model"))),
      el("div", { class: "cards" }, tiers.map(tierCard))));
  }
  say(`${models.length} model(s), ${data.length - models.length} tier(s)`);
}

// ---- silence maps -------------------------------------------------------------------------

// magma-like ramp: 0 (never silent) dark, 1 (always silent) light
const RAMP = [[0, 0, 4], [59, 15, 112], [140, 41, 129], [222, 73, 104], [254, 159, 109], [252, 253, 191]];
function ramp(t) {
  const x = Math.max(0, Math.min(1, t)) * (RAMP.length - 1);
  const i = Math.min(RAMP.length - 2, Math.floor(x)), f = x - i;
  return RAMP[i].map((a, k) => Math.round(a + (RAMP[i + 1][k] - a) * f));
}

function bytes(b64) {
  const s = atob(b64);
  const out = new Uint8Array(s.length);
  for (let i = 0; i < s.length; i++) out[i] = s.charCodeAt(i);
  return out;
}

function drawHeat(canvas, kind, cursor) {
  const { layers, channels } = kind;
  const u8 = kind._u8 || (kind._u8 = bytes(kind.silent_u8));
  canvas.width = channels;
  canvas.height = layers;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(channels, layers);
  for (let i = 0; i < layers * channels; i++) {
    const [r, g, b] = ramp(u8[i] / 255);
    img.data.set([r, g, b, 255], i * 4);
  }
  ctx.putImageData(img, 0, 0);
  if (cursor) {
    // the chosen channel's column, and its layer marked at both ends of the row
    ctx.fillStyle = "rgba(31,111,235,0.9)";
    ctx.fillRect(cursor.channel, 0, 1, layers);
    const mark = Math.max(4, Math.round(channels / 60));
    ctx.fillRect(0, cursor.layer, mark, 1);
    ctx.fillRect(channels - mark, cursor.layer, mark, 1);
  }
}

async function viewSilence(view, modelId) {
  const { data } = await api("/v1/models");
  const models = data.filter((m) => !m.tier).map((m) => m.id);
  const model = modelId && models.includes(modelId) ? modelId : models[0];
  view.append(el("h1", {}, "Silence maps"));
  view.append(el("p", { class: "note" },
    "Each cell is a channel of a layer: the share of calibration tokens on which its activation |a| stays under the layer's threshold (light: almost always silent). Click a channel, or choose it below, to see its activation on each calibration sample."));
  const modelSelect = el("select", { id: "sm-model" }, models.map((m) => el("option", { value: m, selected: m === model }, m)));
  const kindSelect = el("select", { id: "sm-kind" });
  const quantile = el("input", { id: "sm-quantile", type: "number", min: "0.01", max: "0.99", step: "0.01" });
  view.append(el("div", { class: "controls" },
    el("div", {}, el("label", { for: "sm-model" }, "Model"), modelSelect),
    el("div", {}, el("label", { for: "sm-kind" }, "Activation"), kindSelect),
    el("div", {}, el("label", { for: "sm-quantile" }, "Threshold quantile"), quantile)));
  modelSelect.addEventListener("change", () => { location.hash = `#/silence/${encodeURIComponent(modelSelect.value)}`; });

  const meta = el("p", { class: "note", id: "sm-meta" });
  const canvas = el("canvas", { class: "heat", id: "sm-heat", tabindex: "0", role: "img",
    "aria-label": "Silence map: layers as rows, channels as columns. Arrow keys move the selected channel, Enter shows it." });
  const layerIn = el("input", { id: "sm-layer", type: "number", min: "0", step: "1", value: "0" });
  const channelIn = el("input", { id: "sm-channel", type: "number", min: "0", step: "1", value: "0" });
  const show = el("button", { type: "submit" }, "Show channel");
  const pick = el("form", { class: "controls", id: "sm-pick" },
    el("div", {}, el("label", { for: "sm-layer" }, "Layer"), layerIn),
    el("div", {}, el("label", { for: "sm-channel" }, "Channel"), channelIn), el("div", {}, show));
  const bars = el("div", { id: "sm-bars" });
  const channelOut = el("div", { id: "sm-channel-view", "aria-live": "polite" },
    el("p", { class: "note" }, "No channel chosen yet."));
  const live = el("div", { id: "sm-live" });
  view.append(el("div", { class: "panel" }, meta,
    el("div", { class: "legend" }, "never silent", el("span", { class: "ramp", "aria-hidden": "true" }), "always silent"),
    el("div", { class: "heat-wrap" }, canvas), pick));
  view.append(el("div", { class: "grid2" },
    el("div", { class: "panel" }, el("h2", {}, "Channel"), channelOut),
    el("div", { class: "panel" }, el("h2", {}, "Silent channels per layer"), bars)));
  view.append(el("div", { class: "panel" }, el("h2", {}, "Live, against the map"), live));

  let smap;
  const cursor = { layer: 0, channel: 0 };
  const current = () => smap.kinds[kindSelect.value];

  async function load() {
    const q = quantile.value ? `?quantile=${encodeURIComponent(quantile.value)}` : "";
    try {
      smap = await api(`/v1/models/${encodeURIComponent(model)}/silence_map${q}`);
    } catch (err) {
      meta.textContent = err.message;
      return;
    }
    if (!kindSelect.options.length) {
      for (const k of Object.keys(smap.kinds)) {
        kindSelect.append(el("option", { value: k }, k === "mlp" ? "MLP intermediate (down_proj input)" : "attention output (o_proj input)"));
      }
    }
    quantile.value = smap.quantile;
    meta.textContent = `${model}: ${smap.samples} calibration samples × ${smap.seq_len} tokens of ${smap.corpus}; threshold per layer at the ${smap.quantile} quantile of |a|.`;
    redraw();
    say(`silence map of ${model} loaded`);
  }

  function redraw() {
    const kind = current();
    layerIn.max = kind.layers - 1;
    channelIn.max = kind.channels - 1;
    drawHeat(canvas, kind, cursor);
    bars.replaceChildren(lineChart({
      title: `Share of channels silent on at least ${pct(smap.silent_share, 0)} of tokens, per layer`,
      series: [{ values: kind.silence_ratio, label: "silent channels", colour: PALETTE[0] }],
      xLabel: "layer", yLabel: "silent channels",
      yFormat: (v) => pct(v, Math.max(...kind.silence_ratio) < 0.1 ? 1 : 0), height: 200 }),
      el("p", { class: "note" }, `A channel counts as silent when it is under its layer's threshold on at least ${pct(smap.silent_share, 0)} of tokens.`));
  }

  async function showChannel() {
    const kind = kindSelect.value;
    const layer = Number(layerIn.value), channel = Number(channelIn.value);
    try {
      const c = await api(`/v1/models/${encodeURIComponent(model)}/silence_map/${kind}/${layer}/${channel}?quantile=${smap.quantile}`);
      Object.assign(cursor, { layer, channel });
      drawHeat(canvas, current(), cursor);
      channelOut.replaceChildren(
        el("p", {}, el("strong", { id: "sm-channel-title" }, `Layer ${c.layer}, channel ${c.channel}`),
          ` (${kind}): silent on ${pct(c.silent_fraction)} of tokens`),
        lineChart({ title: `Mean |a| of layer ${c.layer} channel ${c.channel} on each calibration sample`,
          series: [{ values: c.samples, label: "mean |a|", colour: PALETTE[1] },
            { values: c.samples.map(() => c.threshold), label: "layer threshold", colour: "#98a4b0", dash: "5 4" }],
          xLabel: "calibration sample", yLabel: "mean |a|", yFormat: (v) => v.toPrecision(2), height: 200 }),
        el("dl", { class: "facts" },
          el("dt", {}, "mean |a|"), el("dd", {}, c.mean_abs.toPrecision(3)),
          el("dt", {}, "max |a|"), el("dd", {}, c.max_abs.toPrecision(3)),
          el("dt", {}, "layer threshold"), el("dd", {}, c.threshold.toPrecision(3))));
      say(`layer ${c.layer} channel ${c.channel} shown`);
    } catch (err) {
      channelOut.replaceChildren(el("p", { class: "error", role: "alert" }, err.message));
    }
  }

  canvas.addEventListener("click", (ev) => {
    const kind = current();
    const rect = canvas.getBoundingClientRect();
    layerIn.value = Math.min(kind.layers - 1, Math.floor(((ev.clientY - rect.top) / rect.height) * kind.layers));
    channelIn.value = Math.min(kind.channels - 1, Math.floor(((ev.clientX - rect.left) / rect.width) * kind.channels));
    showChannel();
  });
  canvas.addEventListener("keydown", (ev) => {
    const kind = current();
    const step = ev.shiftKey ? 16 : 1;
    const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -step], ArrowRight: [0, step] };
    if (moves[ev.key]) {
      ev.preventDefault();
      cursor.layer = Math.max(0, Math.min(kind.layers - 1, cursor.layer + moves[ev.key][0]));
      cursor.channel = Math.max(0, Math.min(kind.channels - 1, cursor.channel + moves[ev.key][1]));
      layerIn.value = cursor.layer;
      channelIn.value = cursor.channel;
      drawHeat(canvas, kind, cursor);
    } else if (ev.key === "Enter") {
      ev.preventDefault();
      showChannel();
    }
  });
  pick.addEventListener("submit", (ev) => { ev.preventDefault(); showChannel(); });
  kindSelect.addEventListener("change", redraw);
  quantile.addEventListener("change", load);

  // live: each tier's activation sparsity per layer now, against what was calibrated
  const tiers = data.filter((m) => m.root === model);
  const monitored = tiers.filter((m) => m.tier_card && m.tier_card.monitoring && m.tier_card.monitoring.activation_sparsity);
  if (!monitored.length) {
    live.append(el("p", { class: "note" }, "No tier has sampled live traffic yet: its activation sparsity and drift show here once requests come in."));
  } else {
    live.append(el("div", { class: "scroll" }, el("table", {}, el("caption", { class: "visually-hidden" }, "Live signals per tier"),
      el("thead", {}, el("tr", {}, ["Tier", "Live sparsity", "Calibrated", "Largest drift", "Sampled tokens"].map((h, i) => el("th", { scope: "col", class: i ? "num" : null }, h)))),
      el("tbody", {}, monitored.map((m) => {
        const s = m.tier_card.monitoring;
        const mean = (xs) => { const v = (xs || []).filter((x) => x !== null); return v.length ? v.reduce((a, b) => a + b, 0) / v.length : null; };
        return el("tr", {}, el("th", { scope: "row" }, m.tier),
          el("td", { class: "num" }, pct(mean(s.activation_sparsity))),
          el("td", { class: "num" }, pct(mean(s.calibrated_sparsity))),
          el("td", { class: `num ${s.drift_flag ? "worse" : ""}` }, s.drift_max_points === undefined ? "–" : `${s.drift_max_points.toFixed(1)} points${s.drift_flag ? " (over the limit)" : ""}`),
          el("td", { class: "num" }, s.sampled_tokens ?? "–"));
      })))));
    const figures = el("div", { class: "charts" });
    for (const m of monitored) {
      const s = m.tier_card.monitoring;
      const series = [{ values: s.activation_sparsity, label: "live", colour: PALETTE[0] }];
      if (s.calibrated_sparsity) series.push({ values: s.calibrated_sparsity, label: "calibrated", colour: "#98a4b0", dash: "5 4" });
      figures.append(el("figure", {}, el("figcaption", {}, `${m.id}: activation sparsity per layer, live (solid) and calibrated (dashed)`),
        lineChart({ title: `${m.id}: activation sparsity per layer`, series, xLabel: "layer", yLabel: "sparsity", yFormat: (v) => pct(v, 0), height: 260 })));
    }
    live.append(figures);
  }
  await load();
}

// ---- usage --------------------------------------------------------------------------------

function isoDay(d) {
  return d.toISOString().slice(0, 10);
}

function barChart({ groups, series, title, yLabel, yFormat, height = 220 }) {
  // groups: x labels; series: [{label, colour, values}] stacked per group
  const W = 720, H = height, L = 64, R = 12, T = 12, B = 44;
  const totals = groups.map((_, i) => series.reduce((a, s) => a + (s.values[i] || 0), 0));
  const top = Math.max(...totals, 1e-12);
  const bw = (W - L - R) / Math.max(groups.length, 1);
  const sy = (v) => T + (1 - v / top) * (H - T - B);
  const parts = [];
  for (const t of ticks(0, top)) {
    parts.push(svg("line", { x1: L, x2: W - R, y1: sy(t), y2: sy(t), stroke: "#eef1f4" }));
    parts.push(svg("text", { x: L - 6, y: sy(t) + 4, "text-anchor": "end" }, yFormat(t)));
  }
  const every = Math.ceil(groups.length / 10);
  groups.forEach((g, i) => {
    let base = 0;
    for (const s of series) {
      const v = s.values[i] || 0;
      if (v > 0) {
        parts.push(svg("rect", { x: L + i * bw + bw * 0.15, width: bw * 0.7, y: sy(base + v),
          height: sy(base) - sy(base + v), fill: s.colour },
          svg("title", {}, `${g} · ${s.label}: ${yFormat(v)}`)));
      }
      base += v;
    }
    if (i % every === 0) {
      parts.push(svg("text", { x: L + (i + 0.5) * bw, y: H - B + 14, "text-anchor": "middle" }, g));
    }
  });
  parts.push(svg("line", { x1: L, x2: W - R, y1: H - B, y2: H - B, stroke: "#98a4b0" }));
  parts.push(svg("text", { x: 12, y: (T + H - B) / 2, "text-anchor": "middle",
    transform: `rotate(-90 12 ${(T + H - B) / 2})` }, yLabel));
  let lx = L;
  for (const s of series) {
    parts.push(svg("rect", { x: lx, y: H - 16, width: 10, height: 10, fill: s.colour }));
    parts.push(svg("text", { x: lx + 14, y: H - 7 }, s.label));
    lx += 24 + 7 * s.label.length;
  }
  const desc = groups.map((g, i) => `${g}: ${yFormat(totals[i])}`).join("; ");
  return svg("svg", { class: "chart", viewBox: `0 0 ${W} ${H}`, role: "img", "aria-label": `${title}. ${desc}` }, parts);
}

function table(caption, head, rows, numeric = []) {
  return el("div", { class: "scroll" }, el("table", {},
    el("caption", { class: "visually-hidden" }, caption),
    el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { scope: "col", class: numeric.includes(i) ? "num" : null }, h)))),
    el("tbody", {}, rows.map((r) => el("tr", {}, r.map((c, i) => el("td", { class: numeric.includes(i) ? "num" : null }, c)))))));
}

async function download(path, filename) {
  const resp = await fetch(path, { headers: { Authorization: `Bearer ${state.key}` }, cache: "no-store" });
  if (!resp.ok) throw new ApiError(resp.status, await resp.json().catch(() => null));
  const url = URL.createObjectURL(await resp.blob());
  const a = el("a", { href: url, download: filename });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

async function viewUsage(view) {
  view.append(el("h1", {}, "Usage"));
  const a = state.account;
  const lim = a.plan.limits;
  const account = await api("/v1/account");
  view.append(el("div", { class: "grid2" },
    el("div", { class: "panel", id: "budget" }, el("h2", {}, `This month (${account.month})`),
      el("dl", { class: "facts" },
        el("dt", {}, "Spent"), el("dd", {}, `$${account.spent_usd}`),
        el("dt", {}, "Budget"), el("dd", {}, account.budget_usd === null ? "no budget" : `$${account.budget_usd}`),
        el("dt", {}, "Remaining"), el("dd", {}, account.remaining_usd === null ? "–" : `$${account.remaining_usd}`))),
    el("div", { class: "panel" }, el("h2", {}, `Plan ${a.plan.name}`),
      el("dl", { class: "facts" },
        el("dt", {}, "Requests per minute"), el("dd", {}, lim.requests_per_minute ?? "no limit"),
        el("dt", {}, "Tokens per minute"), el("dd", {}, lim.tokens_per_minute ?? "no limit"),
        el("dt", {}, "Requests at once"), el("dd", {}, lim.concurrent_requests ?? "no limit"),
        el("dt", {}, "Monthly budget"), el("dd", {}, lim.monthly_budget_usd === null ? "none" : `$${lim.monthly_budget_usd}`)))));
  await usagePanels(view, "/v1");
  say("usage loaded");
}

async function usagePanels(view, base) {
  // a tenant's usage charts, request log and this month's invoice, read under base
  // ("/v1": the caller's tenant; "/admin/tenants/<id>": any tenant, for the admin key)
  const today = new Date();
  const start = new Date(today.getTime() - 29 * 86400_000);
  const month = isoDay(today).slice(0, 7);
  // charts from the billing aggregates: the last 30 days by day and tier, and by key
  const q = `start=${isoDay(start)}&end=${isoDay(today)}`;
  const byTier = await api(`${base}/usage?${q}&group_by=day,tier`);
  const byKey = await api(`${base}/usage?${q}&group_by=key`);
  const days = [];
  for (let d = new Date(start); d <= today; d = new Date(d.getTime() + 86400_000)) days.push(isoDay(d));
  const tiers = [...new Set(byTier.data.map((r) => r.tier))].sort();
  const series = (measure) => tiers.map((t, k) => ({ label: t, colour: PALETTE[k % PALETTE.length],
    values: days.map((day) => byTier.data.filter((r) => r.day === day && r.tier === t).reduce((s, r) => s + Number(r[measure]), 0)) }));
  const charts = el("div", { class: "panel", id: "usage-charts" }, el("h2", {}, "Last 30 days"));
  if (!byTier.data.length) {
    charts.append(el("p", { class: "note" }, "No usage in the last 30 days."));
  } else {
    charts.append(el("div", { class: "charts" },
      el("figure", {}, el("figcaption", {}, "Tokens per day, by tier"),
        barChart({ groups: days.map((d) => d.slice(5)), series: series("total_tokens"), title: "Tokens per day by tier", yLabel: "tokens", yFormat: (v) => Math.round(v).toLocaleString("en") })),
      el("figure", {}, el("figcaption", {}, "Cost per day, by tier"),
        barChart({ groups: days.map((d) => d.slice(5)), series: series("cost_usd"), title: "Cost per day by tier", yLabel: "USD", yFormat: (v) => `$${v.toFixed(4)}` }))));
    charts.append(el("h3", {}, "By key"), table("Usage by key, last 30 days", ["Key", "Requests", "Tokens", "Cost"],
      byKey.data.map((r) => [r.key, r.requests, r.total_tokens.toLocaleString("en"), `$${r.cost_usd}`]), [1, 2, 3]));
    charts.append(el("p", { class: "note" }, `Totals: ${byTier.totals.requests} requests, ${byTier.totals.total_tokens.toLocaleString("en")} tokens, $${byTier.totals.cost_usd}.`));
  }
  view.append(charts);

  // the request log, a page at a time
  const log = el("div", { class: "panel", id: "request-log" }, el("h2", {}, "Requests of the last 7 days"));
  const body = el("div", { "aria-live": "polite" });
  const newer = el("button", { type: "button", class: "secondary", id: "log-newer" }, "Newer");
  const older = el("button", { type: "button", class: "secondary", id: "log-older" }, "Older");
  const csvButton = el("button", { type: "button", class: "secondary", id: "log-csv" }, "Download CSV");
  log.append(body, el("p", { class: "controls" }, newer, older, csvButton));
  view.append(log);
  const cursors = [null];
  let at = 0;
  async function showPage() {
    const c = cursors[at];
    const page = await api(`${base}/requests?days=7&limit=20${c ? `&cursor=${encodeURIComponent(c)}` : ""}`);
    cursors[at + 1] = page.next_cursor;
    newer.disabled = at === 0;
    older.disabled = !page.has_more;
    body.replaceChildren(page.data.length
      ? table("Requests, newest first", ["Time (UTC)", "Model", "Status", "Tokens in", "Tokens out", "Cost", "Latency"],
        page.data.map((r) => [r.time.replace("T", " ").slice(0, 19), `${r.model}:${r.tier}`, r.status,
          r.prompt_tokens, r.completion_tokens, `$${r.cost_usd}`, r.latency_ms === null ? "–" : `${(r.latency_ms / 1000).toFixed(2)} s`]), [3, 4, 5, 6])
      : el("p", { class: "note" }, "No requests in the last 7 days."));
  }
  newer.addEventListener("click", () => { at = Math.max(0, at - 1); showPage(); });
  older.addEventListener("click", () => { at += 1; showPage(); });
  csvButton.addEventListener("click", () => download(`${base}/requests?days=7&format=csv`, "requests-7d.csv").catch((err) => say(err.message)));
  await showPage();

  // this month's invoice
  const inv = el("div", { class: "panel", id: "invoice" }, el("h2", {}, `Invoice ${month}`));
  view.append(inv);
  try {
    const invoice = await api(`${base}/invoices/${month}`);
    inv.append(el("p", {}, `Status ${invoice.status}; closes ${invoice.closes_at.slice(0, 10)}. Total so far `, el("strong", { id: "invoice-total" }, `$${invoice.total_usd}`), "."),
      table(`Invoice ${month} line items`, ["Model", "Tier", "Requests", "Tokens in", "Tokens out", "Amount"],
        invoice.lines.map((l) => [l.model, l.tier, l.requests, l.prompt_tokens, l.completion_tokens, `$${l.amount_usd}`]), [2, 3, 4, 5]));
  } catch (err) {
    if (err.status !== 404) throw err;
    inv.append(el("p", { class: "note" }, "No usage this month yet."));
  }
}

// ---- batches ------------------------------------------------------------------------------

const ACTIVE_BATCH = new Set(["validating", "in_progress", "finalizing", "cancelling"]);

function batchProgress(b) {
  const c = b.request_counts;
  const done = c.completed + c.failed;
  return el("span", { class: "progress" },
    el("progress", { max: Math.max(1, c.total), value: done, "aria-label": `${b.id}: ${done} of ${c.total} requests done` }),
    ` ${done} / ${c.total}`, c.failed ? ` (${c.failed} failed)` : "");
}

function batchFiles(b) {
  const out = [];
  for (const [id, label] of [[b.output_file_id, "Output"], [b.error_file_id, "Errors"]]) {
    if (!id) continue;
    out.push(el("button", { type: "button", class: "secondary",
      onclick: () => download(`/v1/files/${encodeURIComponent(id)}/content`, `${b.id}-${label.toLowerCase()}.jsonl`).catch((err) => say(err.message)) }, label));
  }
  return out.length ? out : "–";
}

async function viewBatches(view) {
  view.append(el("h1", {}, "Batches"),
    el("p", { class: "note" }, "Files of requests run on the tiers' spare capacity at the batch price (POST /v1/batches); newest first."));
  const body = el("div", { id: "batches", "aria-live": "polite" });
  view.append(el("div", { class: "panel" }, body));
  async function draw() {
    const page = await api("/v1/batches?limit=100");
    body.replaceChildren(page.data.length
      ? table("Batches, newest first", ["Batch", "Endpoint", "Status", "Created (UTC)", "Progress", "Files"],
        page.data.map((b) => [b.id, b.endpoint, b.status, when(b.created_at), batchProgress(b), batchFiles(b)]))
      : el("p", { class: "note" }, "No batches yet."));
    return page.data.some((b) => ACTIVE_BATCH.has(b.status));
  }
  let active = await draw();
  // while a batch runs, its progress is read again every 2 s (only while this page is shown)
  const timer = setInterval(async () => {
    if (!view.isConnected) { clearInterval(timer); return; }
    if (active) active = await draw().catch(() => active);
  }, 2000);
  say("batches loaded");
}

// ---- playground ---------------------------------------------------------------------------

async function* sse(resp) {
  // the JSON payloads of a server-sent event stream, as they arrive
  const reader = resp.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      const data = block.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("\n");
      if (data && data !== "[DONE]") yield JSON.parse(data);
    }
  }
}

function costOf(tier, usage) {
  // the request's cost at the key's plan's prices (per 1K tokens; cached input at its price)
  const prices = state.account && state.account.plan.prices[tier];
  if (!prices || !usage) return null;
  const cached = (usage.input_tokens_details && usage.input_tokens_details.cached_tokens) || 0;
  return ((usage.input_tokens - cached) * Number(prices.prompt_per_1k)
    + cached * Number(prices.cached_prompt_per_1k)
    + usage.output_tokens * Number(prices.completion_per_1k)) / 1000;
}

function chatColumn(id, tiers, model) {
  // one conversation with one tier: its transcript, and the usage and cost of each turn
  const select = el("select", { id: `${id}-tier` }, tiers.map((t) => el("option", { value: t }, `${model}:${t}`)));
  const log = el("ol", { class: "transcript", id: `${id}-log`, "aria-live": "polite" });
  const col = { previous: null, select, log, busy: false };
  col.node = el("section", { class: "panel chat", "aria-labelledby": `${id}-title` },
    el("h2", { id: `${id}-title` }, id === "left" ? "Tier A" : "Tier B"),
    el("div", { class: "controls" }, el("div", {}, el("label", { for: `${id}-tier` }, "Tier"), select)),
    log);
  select.addEventListener("change", () => { col.previous = null; log.replaceChildren(); });
  col.ask = async (text, maxTokens) => {
    const tier = select.value;
    log.append(el("li", { class: "turn user" }, el("span", { class: "who" }, "You"), el("p", {}, text)));
    const answer = el("p", { class: "answer" });
    const meta = el("p", { class: "meta note" }, "…");
    log.append(el("li", { class: "turn assistant" }, el("span", { class: "who" }, `${model}:${tier}`), answer, meta));
    const body = { model: `${model}:${tier}`, input: text, stream: true, max_output_tokens: maxTokens };
    if (col.previous) body.previous_response_id = col.previous;
    const started = performance.now();
    let first = null;
    const resp = await fetch("/v1/responses", {
      method: "POST",
      headers: { Authorization: `Bearer ${state.key}`, "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
    if (!resp.ok) {
      const err = new ApiError(resp.status, await resp.json().catch(() => null));
      meta.textContent = `Refused: ${err.message}`;
      meta.className = "meta error";
      return;
    }
    for await (const ev of sse(resp)) {
      if (ev.type === "response.output_text.delta") {
        if (first === null) first = performance.now();
        answer.textContent += ev.delta;
      } else if (ev.type === "response.completed" || ev.type === "response.incomplete") {
        const r = ev.response;
        col.previous = r.id;
        const cost = costOf(tier, r.usage);
        const secs = ((performance.now() - started) / 1000).toFixed(2);
        const ttft = first === null ? "–" : `${((first - started) / 1000).toFixed(2)} s`;
        meta.textContent = `${r.usage.input_tokens} tokens in, ${r.usage.output_tokens} out`
          + (cost === null ? "" : ` · $${cost.toFixed(6)}`) + ` · first token ${ttft}, ${secs} s in all`
          + (r.status === "incomplete" ? " · cut at the token limit" : "");
        meta.dataset.cost = cost === null ? "" : cost.toFixed(9);
        meta.dataset.outputTokens = r.usage.output_tokens;
        meta.dataset.responseId = r.id;
      } else if (ev.type === "error" || ev.type === "response.failed") {
        meta.textContent = `Failed: ${(ev.error || (ev.response && ev.response.error) || {}).message || "error"}`;
        meta.className = "meta error";
      }
    }
  };
  return col;
}

async function viewPlayground(view) {
  const { data } = await api("/v1/models");
  const a = state.account;
  const models = data.filter((m) => !m.tier).map((m) => m.id);
  const model = models[0];
  const ready = data.filter((m) => m.root === model && (m.status || "ready") === "ready" && a.plan.tiers.includes(m.tier)).map((m) => m.tier);
  view.append(el("h1", {}, "Playground"));
  view.append(el("p", { class: "note" },
    "Chat with a tier of your plan through the Responses API; each turn continues the conversation (previous_response_id). Turn on the second column to ask two tiers the same thing side by side."));
  const left = chatColumn("left", ready, model);
  const right = chatColumn("right", ready, model);
  if (ready.length > 1) right.select.value = ready[ready.length - 1];
  right.node.hidden = true;
  const prompt = el("textarea", { id: "pg-prompt", rows: "3", required: true });
  const maxTokens = el("input", { id: "pg-max", type: "number", min: "1", max: "1024", value: "64" });
  const sideBySide = el("input", { id: "pg-compare", type: "checkbox" });
  const send = el("button", { type: "submit", id: "pg-send" }, "Send");
  const form = el("form", { class: "panel", id: "pg-form" },
    el("div", { class: "prompt" }, el("label", { for: "pg-prompt" }, "Message"), prompt),
    el("div", { class: "controls" },
      el("div", {}, el("label", { for: "pg-max" }, "Most output tokens"), maxTokens),
      el("div", { class: "check" }, sideBySide, el("label", { for: "pg-compare" }, "Compare with a second tier")),
      el("div", {}, send)));
  sideBySide.addEventListener("change", () => { right.node.hidden = !sideBySide.checked; });
  prompt.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && (ev.ctrlKey || ev.metaKey)) { ev.preventDefault(); form.requestSubmit(); }
  });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const text = prompt.value.trim();
    if (!text || send.disabled) return;
    send.disabled = true;
    prompt.value = "";
    say("answering");
    try {
      const n = Number(maxTokens.value) || 64;
      await Promise.all([left.ask(text, n), ...(sideBySide.checked ? [right.ask(text, n)] : [])]);
      say("answered");
    } finally {
      send.disabled = false;
      prompt.focus();
    }
  });
  view.append(el("div", { class: "grid2" }, left.node, right.node), form);
  if (!ready.length) view.append(el("p", { class: "error" }, "No tier of your plan is ready yet."));
}

// ---- keys ---------------------------------------------------------------------------------

function when(unix) {
  return new Date(unix * 1000).toISOString().replace("T", " ").slice(0, 16);
}

function revokeButton(k, onRevoked) {
  // two steps: Revoke, then Confirm revoke (or Cancel), so no key goes by a slip
  const cell = el("span", { class: "actions" });
  const ask = el("button", { type: "button", class: "secondary danger", "data-action": "revoke",
    "aria-label": `Revoke key ${k.name || k.key_id}` }, "Revoke");
  ask.addEventListener("click", () => {
    const yes = el("button", { type: "button", class: "danger", "data-action": "confirm-revoke",
      "aria-label": `Confirm: revoke key ${k.name || k.key_id}` }, "Confirm revoke");
    const no = el("button", { type: "button", class: "secondary" }, "Cancel");
    no.addEventListener("click", () => { cell.replaceChildren(ask); ask.focus(); });
    yes.addEventListener("click", async () => {
      yes.disabled = true;
      try {
        await onRevoked();
      } catch (err) {
        say(`Could not revoke: ${err.message}`);
        yes.disabled = false;
      }
    });
    cell.replaceChildren(yes, no);
    yes.focus();
  });
  cell.append(ask);
  return cell;
}

function labelEditor(k, save) {
  const input = el("input", { type: "text", value: k.name, maxlength: "200", class: "label-input",
    "aria-label": `Label of key ${k.key_id}` });
  const button = el("button", { type: "button", class: "secondary", "data-action": "save-label",
    "aria-label": `Save the label of key ${k.key_id}` }, "Save");
  button.addEventListener("click", async () => {
    try {
      await save(input.value);
      say(`label of ${k.key_id} saved`);
    } catch (err) {
      say(`Could not save the label: ${err.message}`);
    }
  });
  input.addEventListener("keydown", (ev) => { if (ev.key === "Enter") button.click(); });
  return el("span", { class: "label-edit" }, input, button);
}

function keysTable(keys, { plans, onPlan, onLabel, onRevoke, showTenant }) {
  const head = ["Key", "Label", ...(showTenant ? ["Tenant"] : []), "Plan", "Created (UTC)", "State", ""];
  const rows = keys.map((k) => {
    const plan = plans && !k.revoked
      ? el("select", { "aria-label": `Plan of key ${k.key_id}`, "data-action": "plan" },
        plans.map((p) => el("option", { value: p, selected: p === k.plan }, p)))
      : k.plan;
    if (plan instanceof Node) plan.addEventListener("change", () => onPlan(k, plan.value));
    // data-label: the column's name, shown beside each cell where a phone stacks the row
    const tr = el("tr", { "data-key-id": k.key_id, class: k.revoked ? "revoked" : null },
      el("td", { "data-label": "Key" }, el("code", {}, k.key_id), k.current ? el("span", { class: "badge" }, "this key") : null),
      el("td", { "data-label": "Label" }, k.revoked ? k.name || "–" : labelEditor(k, (name) => onLabel(k, name))),
      showTenant ? el("td", { "data-label": "Tenant" }, el("a", { href: `#/tenants/${encodeURIComponent(k.tenant)}` }, k.tenant)) : null,
      el("td", { "data-label": "Plan" }, plan),
      el("td", { "data-label": "Created (UTC)" }, when(k.created)),
      el("td", { "data-label": "State" }, el("span", { class: `badge ${k.revoked ? "failed" : "ready"}` }, k.revoked ? "revoked" : "active")),
      el("td", {}, k.revoked ? "" : revokeButton(k, () => onRevoke(k))));
    return tr;
  });
  return el("div", { class: "scroll" }, el("table", { id: "keys-table" },
    el("caption", { class: "visually-hidden" }, "API keys"),
    el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, rows)));
}

async function viewKeys(view) {
  view.append(el("h1", {}, "API keys"));
  const holder = el("div", { class: "panel", id: "keys" });
  if (state.admin) {
    const { plans } = await api("/admin/account");
    view.append(createKeyForm(plans, () => show()));
    const filter = el("input", { id: "keys-filter", type: "search", placeholder: "tenant, label or key id" });
    view.append(el("p", { class: "controls" }, el("span", {}, el("label", { for: "keys-filter" }, "Find a key "), filter)), holder);
    let all = false;
    filter.addEventListener("input", () => show());
    async function show() {
      const { data } = await api("/admin/keys");
      const q = filter.value.trim().toLowerCase();
      const found = [...data].reverse().filter((k) => !q || [k.tenant, k.name, k.key_id].some((v) => (v || "").toLowerCase().includes(q)));
      const NEWEST = 50;  // the newest first; the rest on demand
      const more = el("button", { type: "button", class: "secondary", id: "keys-all" }, `Show all ${found.length}`);
      more.addEventListener("click", () => { all = true; show(); });
      holder.replaceChildren(el("h2", {}, `Every key (${data.length})`),
        !all && found.length > NEWEST ? el("p", { class: "note" }, `The newest ${NEWEST} of ${found.length}. `, more) : null,
        found.length ? keysTable(all ? found : found.slice(0, NEWEST), {
          plans,
          showTenant: true,
          onPlan: async (k, plan) => {
            try {
              await api(`/admin/keys/${k.key_id}`, { method: "PATCH", body: { plan } });
              say(`key ${k.key_id} moved to plan ${plan}`);
            } catch (err) { say(`Could not change the plan: ${err.message}`); }
          },
          onLabel: (k, name) => api(`/admin/keys/${k.key_id}`, { method: "PATCH", body: { name } }),
          onRevoke: async (k) => { await api(`/admin/keys/${k.key_id}`, { method: "DELETE" }); say(`key ${k.key_id} revoked`); await show(); },
        }) : el("p", { class: "note" }, data.length ? "No key matches." : "No keys yet."));
    }
    await show();
    return;
  }
  view.append(el("p", { class: "note" },
    "The keys of your account. Any of them can relabel or revoke the others; new keys and plan changes come from the platform's operator (each key has its own limits and budget)."));
  view.append(holder);
  async function show() {
    const { data } = await api("/v1/keys");
    holder.replaceChildren(keysTable(data, {
      onLabel: (k, name) => api(`/v1/keys/${k.key_id}`, { method: "PATCH", body: { name } }),
      onRevoke: async (k) => {
        await api(`/v1/keys/${k.key_id}`, { method: "DELETE" });
        say(`key ${k.key_id} revoked`);
        if (k.current) { signOut(); return; }
        await show();
      },
    }));
  }
  await show();
}

function createKeyForm(plans, refresh) {
  const plan = el("select", { id: "new-plan" }, plans.map((p) => el("option", { value: p }, p)));
  const name = el("input", { id: "new-name", type: "text", maxlength: "200" });
  const tenant = el("input", { id: "new-tenant", type: "text", list: "tenant-list", placeholder: "a new tenant" });
  const list = el("datalist", { id: "tenant-list" });
  const shown = el("div", { id: "new-key", "aria-live": "polite" });
  const form = el("form", { class: "panel", id: "create-key" }, el("h2", {}, "Create a key"),
    el("div", { class: "controls" },
      el("div", {}, el("label", { for: "new-plan" }, "Plan"), plan),
      el("div", {}, el("label", { for: "new-name" }, "Label"), name),
      el("div", {}, el("label", { for: "new-tenant" }, "Tenant (empty: a new one)"), tenant, list),
      el("div", {}, el("button", { type: "submit", id: "create-key-button" }, "Create key"))),
    shown);
  api("/admin/tenants").then(({ data }) => list.replaceChildren(...data.map((t) => el("option", { value: t.tenant })))).catch(() => {});
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { plan: plan.value, name: name.value };
    if (tenant.value.trim()) body.tenant = tenant.value.trim();
    try {
      const made = await api("/admin/keys", { method: "POST", body });
      const secret = el("input", { id: "new-key-value", type: "text", readonly: true, value: made.key, size: "48", "aria-label": "The new key" });
      const copy = el("button", { type: "button", class: "secondary" }, "Copy");
      copy.addEventListener("click", async () => {
        try { await navigator.clipboard.writeText(made.key); say("key copied"); } catch { secret.select(); say("select the key and copy it"); }
      });
      shown.replaceChildren(el("div", { class: "once", role: "alert" },
        el("p", {}, el("strong", {}, "Copy this key now: it is shown once and never again. "),
          `Key ${made.key_id}, plan ${made.plan}, tenant ${made.tenant}.`),
        el("p", { class: "controls" }, secret, copy)));
      name.value = "";
      secret.focus();
      secret.select();
      await refresh();
    } catch (err) {
      shown.replaceChildren(el("p", { class: "error", role: "alert" }, `Could not create the key: ${err.message}`));
    }
  });
  return form;
}

// ---- operator pages -----------------------------------------------------------------------

async function viewTenants(view, tenant) {
  if (tenant) {
    view.append(el("p", {}, el("a", { href: "#/tenants" }, "← Tenants")), el("h1", {}, `Tenant ${tenant}`));
    const t = await api(`/admin/tenants/${encodeURIComponent(tenant)}`);
    view.append(el("div", { class: "panel" }, el("h2", {}, "Keys"),
      table(`Keys of ${tenant}`, ["Key", "Label", "Plan", "Created (UTC)", "State"],
        t.keys.map((k) => [k.key_id, k.name || "–", k.plan, when(k.created), k.revoked ? "revoked" : "active"]))));
    await usagePanels(view, `/admin/tenants/${encodeURIComponent(tenant)}`);
    say(`tenant ${tenant} loaded`);
    return;
  }
  view.append(el("h1", {}, "Tenants"));
  const { data } = await api("/admin/tenants");
  const rows = data.map((t) => [el("a", { href: `#/tenants/${encodeURIComponent(t.tenant)}` }, t.tenant),
    when(t.created), t.active_keys, t.keys, t.plans.join(", ") || "–",
    t.month_total_usd === null ? "–" : `$${t.month_total_usd}`]);
  view.append(el("div", { class: "panel", id: "tenants" },
    data.length ? table("Tenants", ["Tenant", "Since (UTC)", "Active keys", "Keys", "Plans", `This month`], rows, [2, 3, 5])
      : el("p", { class: "note" }, "No tenants yet: create a key.")));
  say(`${data.length} tenant(s)`);
}

function secs(x) {
  if (x === null || x === undefined) return "–";
  return x < 1 ? `${(x * 1000).toFixed(0)} ms` : `${x.toFixed(2)} s`;
}

async function viewOperations(view) {
  view.append(el("h1", {}, "Operations"));
  const canary = el("button", { type: "button", class: "secondary", id: "run-canary" }, "Run the canary now");
  const stamp = el("span", { class: "note", id: "ops-at" });
  view.append(el("p", { class: "controls" }, canary, stamp));
  const alerts = el("div", { class: "panel", id: "alerts" });
  const tiers = el("div", { class: "panel", id: "ops-tiers" });
  view.append(alerts, tiers);
  canary.addEventListener("click", async () => {
    canary.disabled = true;
    say("canary running");
    try { await api("/admin/canary", { method: "POST" }); await draw(); say("canary done"); }
    catch (err) { say(`Canary: ${err.message}`); }
    finally { canary.disabled = false; }
  });
  async function draw() {
    const ops = await api("/admin/operations");
    stamp.textContent = `Live; updated ${when(ops.at)} UTC, every 5 s while this page is open.`;
    alerts.replaceChildren(el("h2", {}, `Collapse alerts (${ops.alerts.length})`),
      ops.alerts.length
        ? el("ul", { class: "alerts" }, ops.alerts.map((a) => el("li", { "data-signal": a.signal },
          el("strong", {}, a.tier), ` ${a.signal.replace("_", " ")}: ${a.message}`)))
        : el("p", { class: "note" }, "None: every tier's live signals are within their limits."));
    const served = ops.tiers;
    const colour = served.map((_, i) => PALETTE[i % PALETTE.length]);
    const short = served.map((t) => t.tier.split(":").pop());
    const bars = (measure, label, fmt) => barChart({ groups: short, title: label, yLabel: label, yFormat: fmt,
      series: served.map((t, i) => ({ label: short[i], colour: colour[i], values: served.map((u) => (u === t ? Number(t[measure]) || 0 : 0)) })), height: 200 });
    tiers.replaceChildren(el("h2", {}, "Tiers"),
      table("Live figures per tier", ["Tier", "State", "Requests", "Shed", "Errors", "First token", "Per token", "Queue wait", "Tokens in", "Tokens out", "Alerts"],
        served.map((t) => [t.tier, t.state, t.requests, t.shed, pct(t.error_rate), secs(t.ttft_s), secs(t.tpot_s),
          secs(t.queue_wait_s), t.prompt_tokens.toLocaleString("en"), t.completion_tokens.toLocaleString("en"), t.alerts]),
        [2, 3, 4, 5, 6, 7, 8, 9, 10]),
      el("div", { class: "charts" },
        el("figure", {}, el("figcaption", {}, "Requests per tier"), bars("requests", "requests", (v) => Math.round(v))),
        el("figure", {}, el("figcaption", {}, "Mean time to first token"), bars("ttft_s", "seconds", (v) => `${v.toFixed(2)} s`))),
      el("p", { class: "note" }, "Counts since the counters began, over every gateway replica; queue wait is this gateway replica's now."));
  }
  await draw();
  const timer = setInterval(() => {
    if (!view.isConnected || !view.contains(tiers)) { clearInterval(timer); return; }
    draw().catch(() => {});
  }, 5000);
  say("operations loaded");
}

// ---- routing ------------------------------------------------------------------------------

const ROUTES = {
  models: viewModels, silence: viewSilence, usage: viewUsage, playground: viewPlayground,
  batches: viewBatches, keys: viewKeys, tenants: viewTenants, operations: viewOperations,
};
const CUSTOMER_ONLY = new Set(["usage", "playground", "batches"]);
const ADMIN_ONLY = new Set(["tenants", "operations"]);

async function route() {
  // each visit draws into a fresh element: a page still loading when another is chosen
  // finishes into a detached one, never into the page now shown
  const view = el("div");
  document.getElementById("view").replaceChildren(view);
  if (!state.account && !state.admin) {
    document.getElementById("sign-in").hidden = false;
    document.getElementById("key").focus();
    return;
  }
  const [name, ...rest] = location.hash.replace(/^#\/?/, "").split("/");
  const allowed = state.admin ? !CUSTOMER_ONLY.has(name) : !ADMIN_ONLY.has(name);
  const page = ROUTES[name] && allowed ? name : "models";
  for (const a of document.querySelectorAll("#nav a")) {
    if (a.getAttribute("href") === `#/${page}`) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  document.title = `${page[0].toUpperCase()}${page.slice(1)} · zerolayer console`;
  try {
    await ROUTES[page](view, ...rest.map(decodeURIComponent));
  } catch (err) {
    if (err.status === 401) { signOut(); return; }
    view.append(el("p", { class: "error", role: "alert" }, `Could not load this page: ${err.message}`));
  }
  document.getElementById("main").focus({ preventScroll: true });
}

async function start() {
  setupSignIn();
  const kept = sessionStorage.getItem(KEY);
  if (kept) {
    try { await signIn(kept); } catch { sessionStorage.removeItem(KEY); state.key = null; }
  }
  showChrome();
  window.addEventListener("hashchange", route);
  await route();
}

start();
