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
  for (const p of points) {
    const g = svg("g", {},
      svg("circle", { class: "point", cx: sx(p.x), cy: sy(p.y), r: 6, fill: p.colour }),
      svg("text", { class: "label", x: sx(p.x) + 9, y: sy(p.y) - 7 }, p.label),
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

function tierCard(m) {
  const card = m.tier_card || {};
  const serving = card.serving || {};
  const q = card.quality || {};
  const price = m.pricing;
  const rows = [
    ["Quality change", q.ppl_delta === undefined ? "–" : `${signed(q.ppl_delta)} perplexity`,
      q.ppl_delta > 0.0001 ? "worse" : q.ppl_delta < -0.0001 ? "better" : null],
    ["KL vs dense", q.kl === undefined ? "–" : q.kl.toFixed(4)],
    ["Compute removed", m.compute_removed ? pct(m.compute_removed.share) : "–"],
    ["Engine", `${m.engine}${serving.device ? ` on ${serving.device}` : ""}`],
    ["2:4 sparse cores", serving.hardware_sparsity ? "active" : "off"],
    ["CPU offload", serving.offload ? "on" : "off"],
    ["Build", m.status || "ready"],
    ["Speed", m.speed && m.speed.tokens_per_s ? `${m.speed.tokens_per_s.toFixed(1)} tokens/s` : "not measured yet"],
    ["Price / 1K in", price ? `$${price.prompt_per_1k}` : state.admin ? "per plan" : "not in your plan"],
    ["Price / 1K out", price ? `$${price.completion_per_1k}` : "–"],
    ["Context", `${m.context_length || m.max_model_len} tokens`],
  ];
  const what = m.compute_removed ? m.compute_removed.of : "";
  return el("article", { class: "card", "data-tier": m.tier, "aria-labelledby": `card-${m.tier}` },
    el("h3", { id: `card-${m.tier}` }, el("span", {}, m.id), statusBadge(m)),
    el("dl", {}, rows.map(([k, v, cls]) => [el("dt", {}, k), el("dd", { class: cls || null,
      title: k === "Compute removed" ? what : null }, v)])),
    card.method ? el("p", { class: "note" }, card.method) : null);
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
        xFormat: (v) => `${(v * 100).toFixed(0)}%`, yFormat: fmtQ })));
  }
  const priced = withQ.filter(({ m }) => m.pricing);
  if (priced.length) {
    charts.push(el("figure", {}, el("figcaption", {}, "Quality change against price"),
      scatter({ title: `${model}: perplexity change against the price of 1K output tokens`,
        points: priced.map(({ m, i }) => ({ x: Number(m.pricing.completion_per_1k), y: qualityOf(m), label: m.tier, colour: colour(i) })),
        xLabel: "USD per 1K output tokens (your plan)", yLabel: "perplexity change",
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
    for (const m of monitored) {
      const s = m.tier_card.monitoring;
      const series = [{ values: s.activation_sparsity, label: "live", colour: PALETTE[0] }];
      if (s.calibrated_sparsity) series.push({ values: s.calibrated_sparsity, label: "calibrated", colour: "#98a4b0", dash: "5 4" });
      live.append(el("figure", {}, el("figcaption", {}, `${m.id}: activation sparsity per layer, live and calibrated`),
        lineChart({ title: `${m.id}: activation sparsity per layer`, series, xLabel: "layer", yLabel: "sparsity", yFormat: (v) => pct(v, 0), height: 180 })));
    }
  }
  await load();
}

// ---- routing ------------------------------------------------------------------------------

const ROUTES = { models: viewModels, silence: viewSilence };

async function route() {
  const view = document.getElementById("view");
  view.replaceChildren();
  if (!state.account && !state.admin) {
    document.getElementById("sign-in").hidden = false;
    document.getElementById("key").focus();
    return;
  }
  const [name, ...rest] = location.hash.replace(/^#\/?/, "").split("/");
  const page = ROUTES[name] ? name : "models";
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
