// tollgate dashboard: reads the admin API (../api/...) and renders it.
// It writes nothing: every request is a GET. Everything shown is built
// with DOM calls and textContent, never HTML from the API's strings (names
// come from labels and tags anyone may write).
"use strict";
(() => {
  // ---------- small helpers ----------
  const SVG = "http://www.w3.org/2000/svg";

  function h(tag, attrs, ...kids) {
    const el = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v == null || v === false) continue;
      if (k === "class") el.setAttribute("class", v);
      else if (k === "text") el.textContent = v;
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? "" : String(v));
    }
    for (const kid of kids.flat(Infinity)) {
      if (kid == null || kid === false) continue;
      el.append(kid instanceof Node ? kid : String(kid));
    }
    return el;
  }

  class APIError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  // get fetches ../api/<path> and returns {body, headers}.
  async function get(path) {
    const r = await fetch("../api/" + path, { headers: { Accept: "application/json" }, cache: "no-store" });
    let body = null;
    try { body = await r.json(); } catch (_) { /* not JSON */ }
    if (!r.ok) throw new APIError(r.status, (body && body.message) || r.status + " " + r.statusText);
    return { body, headers: r.headers };
  }
  const getBody = async (path) => (await get(path)).body;

  const enc = encodeURIComponent;
  const fmtInt = (n) => (n == null ? "–" : Number(n).toLocaleString("en-US"));
  const fmtRate = (n) => (n >= 10 ? n.toFixed(0) : n >= 1 ? n.toFixed(1) : n > 0 ? n.toFixed(2) : "0");
  const sum = (a) => (a || []).reduce((x, y) => x + y, 0);
  const last = (a) => (a && a.length ? a[a.length - 1] : 0);

  // fmtTime is a time as 2026-12-06 08:07:46, local.
  function fmtTime(iso) {
    if (!iso || iso.startsWith("0001-")) return "–";
    const d = new Date(iso);
    const p = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }
  const plural = (n, one, many) => fmtInt(n) + " " + (n === 1 ? one : many);
  function ago(iso) {
    if (!iso || iso.startsWith("0001-")) return "";
    const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
    if (s < 2) return "just now";
    if (s < 120) return s + " s ago";
    if (s < 7200) return Math.round(s / 60) + " min ago";
    if (s < 172800) return Math.round(s / 3600) + " h ago";
    return Math.round(s / 86400) + " days ago";
  }

  const statusWords = { enabled: "enabled", warning: "warning", disabled: "error" };
  function badge(status, text) {
    const s = String(status || "").toLowerCase();
    return h("span", { class: "badge s-" + s }, text || statusWords[s] || s || "unknown");
  }
  function providerOf(name) {
    const i = String(name).lastIndexOf("@");
    return i < 0 ? "" : name.slice(i + 1);
  }
  const link = (kind, name) => h("a", { href: "#/" + kind + "/" + enc(name) }, name);
  const ipLink = (ip) => h("a", { href: "#/refusals?ip=" + enc(ip), title: "Why was " + ip + " refused?" }, ip);
  const whyLink = (ip) => h("a", { href: "#/refusals?ip=" + enc(ip), "aria-label": "Why was " + ip + " refused?" }, "why?");

  function table(caption, heads, rows, opts = {}) {
    const thead = h("thead", {}, h("tr", {}, heads.map((c) => (c instanceof Node ? c : h("th", { scope: "col", class: c.num ? "num" : null }, c.label || c)))));
    const tbody = h("tbody", {}, rows.length ? rows : h("tr", {}, h("td", { colspan: heads.length, class: "muted" }, opts.empty || "Nothing to show.")));
    return h("div", { class: "table-wrap" }, h("table", { id: opts.id }, caption ? h("caption", {}, caption) : null, thead, tbody));
  }
  // row makes a table row that opens href on a click anywhere in it; the
  // keyboard reaches its link (Enter opens it).
  function row(href, cells) {
    const tr = h("tr", { class: href ? "clickable" : null }, cells);
    if (href) {
      tr.addEventListener("click", (e) => {
        if (e.target.closest("a, button, input, select")) return;
        location.hash = href;
      });
    }
    return tr;
  }
  const td = (content, cls) => h("td", { class: cls }, content);
  const num = (n) => h("td", { class: "num" }, fmtInt(n));

  function meter(value, max) {
    const full = max > 0 && value >= max;
    const pct = max > 0 ? Math.min(100, (100 * value) / max) : 0;
    return h("span", { class: "meter" + (full ? " full" : ""), role: "img", "aria-label": value + " of " + max },
      h("span", { style: null, "data-pct": pct.toFixed(1) }));
  }
  // Inline styles are not allowed by the page's Content-Security-Policy:
  // the meters' widths are set from script, through CSSOM.
  function sizeMeters(root) {
    for (const el of root.querySelectorAll("[data-pct]")) el.style.width = el.getAttribute("data-pct") + "%";
  }

  // swap replaces el's children, keeping the keyboard focus on the element
  // with the same link or id when it was inside.
  function swap(el, ...kids) {
    const a = document.activeElement;
    let key = null;
    if (a && a !== document.body && el.contains(a)) key = a.getAttribute("href") || a.id || a.getAttribute("data-key");
    el.replaceChildren(...kids.flat(Infinity).filter((k) => k != null && k !== false));
    sizeMeters(el);
    if (key) {
      const again = [...el.querySelectorAll("[href],[id],[data-key]")].find((n) => (n.getAttribute("href") || n.id || n.getAttribute("data-key")) === key);
      if (again) again.focus();
    }
  }

  function errorBox(err) {
    return h("p", { class: "error-box", role: "alert" }, err instanceof APIError && err.status === 404 ? "Not found: " + err.message : "The API answered: " + err.message);
  }

  // ---------- charts ----------
  const HISTORY = 300;
  const palette = ["#0550ae", "#cf222e", "#116329", "#8250df", "#9a6700", "#bc4c00", "#1b7c83", "#bf3989", "#57606a", "#0a3069", "#6639ba"];

  // chart draws series (each {label, color, values}, values one a second,
  // newest last) as lines over the seconds kept (a minute at least, 5 at
  // most), the newest at the right.
  function chart(title, series, opts = {}) {
    const max = Math.max(1, ...series.map((s) => Math.max(0, ...s.values)));
    const W = Math.min(HISTORY, Math.max(60, ...series.map((s) => s.values.length))), H = 60;
    const svg = h("svg:svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", focusable: "false" });
    svg.append(h("svg:line", { x1: 0, y1: H - 0.5, x2: W, y2: H - 0.5, stroke: "#d0d7de", "stroke-width": 1, "vector-effect": "non-scaling-stroke" }));
    for (const s of series) {
      const n = s.values.length;
      if (!n) continue;
      const pts = s.values.map((v, i) => `${(W - n + i + 0.5).toFixed(1)},${(H - 2 - ((H - 4) * v) / max).toFixed(1)}`).join(" ");
      svg.append(h("svg:polyline", { points: pts, fill: "none", stroke: s.color, "stroke-width": 2, "vector-effect": "non-scaling-stroke", "stroke-linejoin": "round" }));
    }
    const unit = opts.unit ?? "/s";
    const words = series.map((s) => `${s.label}: now ${fmtInt(last(s.values))}${unit}, peak ${fmtInt(Math.max(0, ...s.values))}${unit}, ${fmtInt(opts.gauge ? Math.max(0, ...s.values) : sum(s.values))} ${opts.gauge ? "at most" : "in all"}`).join("; ");
    svg.setAttribute("aria-label", `${title}, last ${Math.round(W / 60)} min: ${words || "no data"}`);
    const legend = h("ul", { class: "legend" }, series.map((s) =>
      h("li", {}, h("span", { class: "key", "data-color": s.color }), `${s.label} `, h("span", { class: "now" }, fmtInt(last(s.values)) + unit),
        opts.gauge ? null : h("span", { class: "muted" }, ` · ${fmtInt(sum(s.values))} in 5 min`))));
    const box = h("figure", { class: "chart", "data-key": "chart-" + title }, h("h3", {}, title), svg, legend);
    for (const k of box.querySelectorAll("[data-color]")) k.style.background = k.getAttribute("data-color");
    return box;
  }

  const reasonLabels = {
    inflightconn_limit: "inFlightConn limit",
    store_unreachable: "shared store unreachable",
    store_queue_full: "shared store queue full",
    ipallowlist_denied: "not in ipAllowList",
    ratelimit: "rateLimit",
    unrouted_limit: "unrouted per IP (maxUnroutedPerIP)",
    unrouted_total_limit: "unrouted in all (maxUnrouted)",
    no_route: "no router matches",
    queue_full: "service queue full",
    queue_timeout: "service queue timeout",
    queue_evicted: "evicted from a service queue",
  };
  const reasonLabel = (r) => reasonLabels[r] || r;
  const reasonOrder = Object.keys(reasonLabels);

  // ---------- pages ----------
  // A page is a function (main, params, query) returning {refresh} or
  // nothing; refresh runs every 2 s while the page is shown.

  async function overview(main) {
    main.append(h("h1", {}, "Overview"));
    const eps = h("div", { class: "cards", id: "entrypoints" });
    const res = h("div", { class: "cards", id: "resources" });
    const probs = h("div", { id: "problems" });
    const reasons = h("div", { id: "reasons" });
    const busy = h("div", { id: "busy" });
    const proc = h("div", { class: "cards", id: "process" });
    const provs = h("div", { id: "providers" });
    main.append(
      h("section", { "aria-labelledby": "h-ep" }, h("h2", { id: "h-ep" }, "Entry points"), eps),
      h("section", { "aria-labelledby": "h-rsn" }, h("h2", { id: "h-rsn" }, "Refusals by reason"), reasons),
      h("section", { "aria-labelledby": "h-busy" }, h("h2", { id: "h-busy" }, "Busiest limiters"), busy),
      h("section", { "aria-labelledby": "h-res" }, h("h2", { id: "h-res" }, "Routers, services, middlewares"), res, probs),
      h("section", { "aria-labelledby": "h-proc" }, h("h2", { id: "h-proc" }, "Process and shared stores"), proc),
      h("section", { "aria-labelledby": "h-prov" }, h("h2", { id: "h-prov" }, "Providers"), provs));

    async function refresh() {
      const [epR, ovR, hiR, liR, prR, stR, pvR] = await Promise.allSettled([
        getBody("entrypoints"), getBody("overview"), getBody("history?seconds=300"), getBody("limiters?top=5"),
        getBody("process"), getBody("stores"), getBody("providers")]);
      if (epR.status === "fulfilled") {
        swap(eps, (epR.value || []).map((ep) => h("article", { class: "card" },
          h("h3", {}, ep.name, " ", h("span", { class: "code muted" }, ep.address)),
          h("p", { class: "big", "aria-label": fmtInt(ep.openConnections) + " open connections" }, fmtInt(ep.openConnections),
            h("span", { class: "muted" }, " open")),
          h("dl", {},
            h("dt", {}, "Accepted"), h("dd", {}, fmtInt(ep.acceptedTotal)),
            h("dt", {}, "No route"), h("dd", {}, fmtInt(ep.noRouteTotal)),
            h("dt", {}, "Unrouted now"), h("dd", {}, fmtInt(ep.unrouted && ep.unrouted.connections)),
            h("dt", {}, "Accept errors"), h("dd", {}, fmtInt(ep.acceptErrorsTotal))))));
      } else swap(eps, errorBox(epR.reason));
      if (ovR.status === "fulfilled") {
        const tcp = ovR.value.tcp || {};
        swap(res, ["routers", "services", "middlewares"].map((k) => {
          const c = tcp[k] || { total: 0, warnings: 0, errors: 0 };
          return h("article", { class: "card" },
            h("h3", {}, h("a", { href: "#/" + k }, k[0].toUpperCase() + k.slice(1))),
            h("p", { class: "big" }, fmtInt(c.total)),
            h("p", { class: "counts" },
              h("a", { href: "#/" + k + "?status=enabled" }, badge("enabled", fmtInt(c.total - c.warnings - c.errors) + " enabled")),
              h("a", { href: "#/" + k + "?status=warning" }, badge("warning", plural(c.warnings, "warning", "warnings"))),
              h("a", { href: "#/" + k + "?status=disabled" }, badge("disabled", plural(c.errors, "error", "errors")))));
        }));
        const bad = [];
        for (const k of ["routers", "services", "middlewares"]) {
          const c = tcp[k] || {};
          if (c.errors) bad.push(get("tcp/" + k + "?status=disabled&per_page=10").then((r) => r.body.map((x) => [k, x])));
          if (c.warnings) bad.push(get("tcp/" + k + "?status=warning&per_page=10").then((r) => r.body.map((x) => [k, x])));
        }
        const found = (await Promise.all(bad)).flat();
        swap(probs, found.length ? [h("h3", {}, "With errors or warnings"), table(null, ["Status", "Name", "Kind", "Problem"],
          found.map(([k, x]) => row("#/" + k + "/" + enc(x.name), [td(badge(x.status)), td(link(k, x.name), "wrap"), td(listDefs[k].one), td((x.error || []).join("; "), "wrap")])),
          { id: "problems-table" })] : []);
      } else swap(res, errorBox(ovR.reason));
      if (hiR.status === "fulfilled") swap(reasons, reasonsView(hiR.value));
      else swap(reasons, errorBox(hiR.reason));
      if (liR.status === "fulfilled") swap(busy, limitersTable(liR.value, "The limiting middlewares that refused most in the last minute, then those with most connections."));
      else swap(busy, errorBox(liR.reason));
      const cards = [];
      if (prR.status === "fulfilled") {
        const p = prR.value;
        cards.push(h("article", { class: "card", id: "process-card" }, h("h3", {}, "This process"),
          h("dl", {},
            h("dt", {}, "Generation"), h("dd", { id: "generation" }, fmtInt(p.generation)),
            h("dt", {}, "State"), h("dd", {}, p.state),
            h("dt", {}, "PID"), h("dd", {}, p.pid),
            p.predecessorPid ? [h("dt", {}, "Predecessor"), h("dd", {}, p.predecessorPid)] : null,
            h("dt", {}, "Upgrades"), h("dd", {}, fmtInt(p.upgrades && p.upgrades.attempts) + " attempted, " + fmtInt(p.upgrades && p.upgrades.failures) + " failed"))));
      } else cards.push(errorBox(prR.reason));
      if (stR.status === "fulfilled") {
        for (const s of stR.value) {
          cards.push(h("article", { class: "card" }, h("h3", {}, "Store " + s.name),
            h("p", {}, s.reachable ? badge("ok", "reachable") : badge("error", "unreachable"), s.evictionRisk ? [" ", badge("warning", "eviction risk")] : null),
            h("dl", {},
              h("dt", {}, "Round trip"), h("dd", {}, fmtInt(s.roundTripMicros) + " µs (mean " + fmtInt(s.avgRoundTripMicros) + " µs)"),
              h("dt", {}, "Failed"), h("dd", {}, fmtInt(s.failedRoundTripsTotal) + " of " + fmtInt(s.roundTripsTotal)),
              h("dt", {}, "Outages"), h("dd", {}, fmtInt(s.outagesTotal)),
              h("dt", {}, "Used by"), h("dd", {}, s.middlewares.map((m, i) => [i ? ", " : "", link("middlewares", m)])))));
        }
        if (!stR.value.length) cards.push(h("p", { class: "muted" }, "No inFlightConn middleware keeps its counts in a shared store."));
      } else cards.push(errorBox(stR.reason));
      swap(proc, cards);
      if (pvR.status === "fulfilled") {
        swap(provs, table(null, ["Provider", "State", "Last configuration", "Updates", "Errors", "Last error"],
          (pvR.value || []).map((p) => h("tr", {}, td(p.name), td(badge(p.state)), td(p.lastUpdate ? ago(p.lastUpdate) : "–"),
            num(p.updates), num(p.errors), td(p.lastError || "", "wrap"))), { empty: "No provider is configured." }));
      } else swap(provs, errorBox(pvR.reason));
      const failed = [epR, ovR, hiR, liR, prR, stR, pvR].find((r) => r.status === "rejected");
      if (failed) throw failed.reason;
    }
    return { refresh };
  }

  // reasonsView: the refusals of the process per second by reason, and
  // their totals.
  function reasonsView(hist) {
    const rs = hist.reasons || {};
    const was = document.getElementById("reasons-details"); // a reader who opened it keeps it open
    const wasOpen = !!(was && was.open);
    const active = reasonOrder.filter((r) => sum(rs[r]) > 0);
    const series = active.map((r) => ({ label: reasonLabel(r), color: palette[reasonOrder.indexOf(r) % palette.length], values: rs[r] }));
    const rows = reasonOrder.map((r) => {
      const v = rs[r] || [];
      return h("tr", { "data-reason": r }, td(reasonLabel(r)), td(r, "code"), num(last(v)), num(sum(v.slice(-60))), num(sum(v)));
    });
    return [
      active.length ? chart("Refused per second", series) : h("p", { class: "muted", id: "no-refusals" }, "Nothing refused in the last 5 minutes."),
      h("details", { id: "reasons-details", open: wasOpen }, h("summary", { id: "reasons-summary" }, "Per reason: last second, minute, 5 minutes"),
        table(null, ["Reason", "Metric label", { label: "Last second", num: true }, { label: "Last minute", num: true }, { label: "Last 5 min", num: true }], rows, { id: "reasons-table" })),
    ];
  }

  function limitersTable(v, caption) {
    const rows = (v.limiters || []).map((l) => row("#/middlewares/" + enc(l.name), [
      td(link("middlewares", l.name)),
      td(l.type === "inflightconn" ? "inFlightConn" : "rateLimit"),
      td([badge(l.status), l.dryRun ? [" ", badge("warning", "dry run")] : null]),
      td(l.type === "inflightconn" ? [fmtInt(l.inFlight), " ", h("span", { class: "muted" }, "(amount " + l.amount + " per client)")] : `${l.average} per ${fmtDuration(l.period)}, burst ${l.burst}`),
      num(l.distinctIPs),
      num(l.admittedLastMinute),
      num(l.refusedLastMinute),
      num(l.rejectedTotal),
      td(l.store ? [l.store, " ", l.storeReachable ? badge("ok", "up") : badge("error", "down")] : "–"),
    ]));
    return [table(caption, ["Middleware", "Type", "Status", "In flight / rule", { label: "Clients", num: true }, { label: "Admitted (1 min)", num: true },
      { label: "Refused (1 min)", num: true }, { label: "Refused in all", num: true }, "Shared store"], rows, { empty: "No inFlightConn or rateLimit middleware.", id: "limiters-table" }),
    v.total > (v.limiters || []).length ? h("p", { class: "muted" }, `${v.limiters.length} of ${fmtInt(v.total)} shown.`) : null];
  }

  async function limiters(main, _p, query) {
    main.append(h("h1", {}, "Limiters"),
      h("p", { class: "note" }, "Every inFlightConn and rateLimit middleware: connections held now, clients counted, and what it admitted and refused in the last minute. Open one for its clients."));
    const search = h("input", { type: "search", id: "limiter-search", value: query.get("search") || "", autocomplete: "off" });
    main.append(h("div", { class: "toolbar", role: "search" }, h("label", { for: "limiter-search" }, "Search by name", search)));
    const out = h("div", { id: "limiters" });
    main.append(out);
    let timer;
    search.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(() => refresh().catch(() => {}), 250); });
    async function refresh() {
      const q = search.value.trim();
      replaceQuery({ search: q });
      swap(out, limitersTable(await getBody("limiters?top=200" + (q ? "&search=" + enc(q) : "")), null));
    }
    return { refresh };
  }

  // ----- lists with the API's search, status, sorting and paging -----
  const listDefs = {
    routers: {
      title: "Routers", one: "router",
      cols: [
        { label: "Status", sort: "status" }, { label: "Name", sort: "name" }, { label: "Rule", sort: "rule" },
        { label: "Entry points", sort: "entryPoints" }, { label: "Service", sort: "service" }, { label: "Middlewares", sort: "middlewares" },
        { label: "Priority", sort: "priority", num: true }, { label: "TLS" }, { label: "Provider", sort: "provider" }],
      cells: (r) => [td(badge(r.status)), td(link("routers", r.name), "wrap"), td(r.rule || "", "code wrap"),
        td((r.using || r.entryPoints || []).join(", ")), td(r.service ? link("services", qualify(r.service, r.name)) : "–"),
        td((r.middlewares || []).map((m, i) => [i ? ", " : "", link("middlewares", qualify(m, r.name))])),
        num(r.priority || 0), td(r.tls ? (r.tls.passthrough ? "passthrough" : "terminated") : "–"), td(r.provider || providerOf(r.name))],
    },
    services: {
      title: "Services", one: "service",
      cols: [{ label: "Status", sort: "status" }, { label: "Name", sort: "name" }, { label: "Type", sort: "type" },
        { label: "Servers", sort: "servers", num: true }, { label: "Health" }, { label: "Used by" }, { label: "Provider", sort: "provider" }],
      cells: (s) => {
        const servers = s.loadBalancer ? s.loadBalancer.servers || [] : s.weighted ? s.weighted.services || [] : [];
        const st = s.serverStatus || {};
        const up = Object.values(st).filter((x) => x === "UP").length;
        return [td(badge(s.status)), td(link("services", s.name), "wrap"), td(s.type || (s.loadBalancer ? "loadbalancer" : "weighted")),
          num(servers.length), td(Object.keys(st).length ? `${up} of ${Object.keys(st).length} up` : "–"),
          td(fmtInt((s.usedBy || []).length) + " routers"), td(s.provider || providerOf(s.name))];
      },
    },
    middlewares: {
      title: "Middlewares", one: "middleware",
      cols: [{ label: "Status", sort: "status" }, { label: "Name", sort: "name" }, { label: "Type", sort: "type" }, { label: "Live" },
        { label: "Used by" }, { label: "Provider", sort: "provider" }],
      cells: (m) => [td(badge(m.status)), td(link("middlewares", m.name), "wrap"), td(typeName(m.type)), td(liveSummary(m)),
        td(fmtInt((m.usedBy || []).length) + " routers"), td(m.provider || providerOf(m.name))],
    },
  };

  // qualify gives a reference without @provider the provider of the
  // resource naming it, as the proxy reads it.
  function qualify(ref, owner) {
    return ref.includes("@") ? ref : ref + "@" + providerOf(owner);
  }
  function typeName(t) {
    const k = String(t || "").toLowerCase();
    return { inflightconn: "inFlightConn", ipallowlist: "ipAllowList", ipwhitelist: "ipWhiteList", ratelimit: "rateLimit" }[k] || t || "–";
  }
  function liveSummary(m) {
    if (m.inFlight) return `${fmtInt(m.inFlight.inFlight)} in flight, ${fmtInt(m.inFlight.distinctIPs)} clients, ${fmtInt(m.inFlight.rejectedTotal)} refused`;
    if (m.rateLimitState) return `${fmtInt(m.rateLimitState.distinctIPs)} clients, ${fmtInt(m.rateLimitState.rejectedTotal)} refused`;
    return "–";
  }

  function listPage(kind) {
    return async (main, _p, query) => {
      const def = listDefs[kind];
      const state = {
        search: query.get("search") || "", status: query.get("status") || "", sortBy: query.get("sortBy") || "name",
        direction: query.get("direction") || "asc", page: Math.max(1, parseInt(query.get("page") || "1", 10) || 1),
        per_page: [25, 50, 100].includes(+query.get("per_page")) ? +query.get("per_page") : 50,
      };
      main.append(h("h1", {}, def.title));
      const total = h("p", { class: "muted", id: "list-total" });
      const search = h("input", { type: "search", id: "list-search", value: state.search, autocomplete: "off" });
      const status = h("select", { id: "list-status" }, ["", "enabled", "warning", "disabled"].map((s) =>
        h("option", { value: s, selected: s === state.status ? true : null }, s ? statusWords[s] : "any")));
      const per = h("select", { id: "list-per-page" }, [25, 50, 100].map((n) => h("option", { value: n, selected: n === state.per_page ? true : null }, n)));
      main.append(h("div", { class: "toolbar", role: "search" },
        h("label", { for: "list-search" }, "Search by name", search),
        h("label", { for: "list-status" }, "Status", status),
        h("label", { for: "list-per-page" }, "Per page", per)), total);
      const out = h("div", { id: "list" });
      const prev = h("button", { type: "button", id: "prev" }, "Previous page");
      const next = h("button", { type: "button", id: "next" }, "Next page");
      const where = h("span", { id: "page-no", "aria-live": "polite" });
      main.append(out, h("nav", { class: "pager", "aria-label": "Pages" }, prev, where, next));

      let seq = 0;
      async function load() {
        const my = ++seq;
        const q = new URLSearchParams({ sortBy: state.sortBy, direction: state.direction, page: state.page, per_page: state.per_page });
        if (state.search) q.set("search", state.search);
        if (state.status) q.set("status", state.status);
        replaceQuery(Object.fromEntries(q));
        let res;
        try {
          res = await get("tcp/" + kind + "?" + q);
        } catch (err) {
          if (my === seq) swap(out, errorBox(err));
          return;
        }
        if (my !== seq) return; // a newer request was made meanwhile
        const items = res.body || [];
        const nextPage = parseInt(res.headers.get("X-Next-Page") || "1", 10);
        const heads = def.cols.map((c) => {
          if (!c.sort) return h("th", { scope: "col", class: c.num ? "num" : null }, c.label);
          const on = state.sortBy === c.sort;
          return h("th", { scope: "col", class: c.num ? "num" : null, "aria-sort": on ? (state.direction === "asc" ? "ascending" : "descending") : null },
            h("button", { type: "button", class: "sort", id: "sort-" + c.sort, "aria-label": `Sort by ${c.label}` + (on ? (state.direction === "asc" ? ", ascending" : ", descending") : ""),
              onclick: () => {
                if (state.sortBy === c.sort) state.direction = state.direction === "asc" ? "desc" : "asc";
                else { state.sortBy = c.sort; state.direction = "asc"; }
                state.page = 1;
                load();
              } }, c.label));
        });
        const rows = items.map((it) => row("#/" + kind + "/" + enc(it.name), def.cells(it)));
        swap(out, table(null, heads, rows, { id: kind + "-table", empty: state.search || state.status ? "No " + kind + " match." : "No " + kind + "." }));
        prev.disabled = state.page <= 1;
        next.disabled = nextPage <= state.page;
        where.textContent = `Page ${state.page}` + (items.length ? ` (${items.length} shown)` : "");
        announce(`${def.title}: page ${state.page}, ${items.length} shown`);
      }
      async function counts() {
        try {
          const ov = await getBody("overview");
          const c = (ov.tcp || {})[kind];
          if (c) total.textContent = `${plural(c.total, def.one, kind)} in all: ${fmtInt(c.warnings)} with warnings, ${fmtInt(c.errors)} with errors.`;
        } catch (_) { /* the list says what failed */ }
      }
      let timer;
      search.addEventListener("input", () => {
        clearTimeout(timer);
        timer = setTimeout(() => { state.search = search.value.trim(); state.page = 1; load(); }, 250);
      });
      status.addEventListener("change", () => { state.status = status.value; state.page = 1; load(); });
      per.addEventListener("change", () => { state.per_page = +per.value; state.page = 1; load(); });
      prev.addEventListener("click", () => { if (state.page > 1) { state.page--; load(); } });
      next.addEventListener("click", () => { state.page++; load(); });
      await Promise.all([load(), counts()]);
      return null; // a list does not refresh by itself: rows would move under the pointer
    };
  }

  // ----- details -----
  async function routerDetail(main, p) {
    const name = p[0];
    const r = await getBody("tcp/routers/" + enc(name));
    main.append(h("h1", {}, "Router ", h("span", { class: "code" }, name), " ", badge(r.status)));
    main.append(problems(r.error));
    main.append(h("dl", { class: "kv" },
      h("dt", {}, "Rule"), h("dd", { class: "code" }, r.rule || "–"),
      h("dt", {}, "Entry points"), h("dd", {}, (r.using || r.entryPoints || []).join(", ") || "–"),
      h("dt", {}, "Service"), h("dd", {}, r.service ? link("services", qualify(r.service, name)) : "–"),
      h("dt", {}, "Middlewares"), h("dd", {}, (r.middlewares || []).length ? r.middlewares.map((m, i) => [i ? " → " : "", link("middlewares", qualify(m, name))]) : "none"),
      h("dt", {}, "Priority"), h("dd", {}, r.priority || "default (rule length)"),
      h("dt", {}, "TLS"), h("dd", {}, r.tls ? (r.tls.passthrough ? "passthrough (routed on the ClientHello's SNI)" : "terminated" + (r.tls.certResolver ? ", certificates from " + r.tls.certResolver : "") + (r.tls.options ? ", options " + r.tls.options : "")) : "none (plain TCP)"),
      h("dt", {}, "Provider"), h("dd", {}, r.provider || providerOf(name))));
    const recent = h("div", { id: "router-refusals" });
    main.append(h("section", { "aria-labelledby": "h-rr" }, h("h2", { id: "h-rr" }, "Recent refusals on this router"), recent));
    async function refresh() {
      swap(recent, refusalsTable(await getBody("refusals?limit=20&router=" + enc(name)), "The latest 20 entries of the record of recent refusals for this router."));
    }
    return { refresh };
  }

  function problems(errs) {
    if (!errs || !errs.length) return document.createDocumentFragment();
    return h("section", { "aria-labelledby": "h-err" }, h("h2", { id: "h-err" }, "Errors and warnings"),
      h("ul", { class: "plain" }, errs.map((e) => h("li", {}, e))));
  }

  async function serviceDetail(main, p) {
    const name = p[0];
    main.append(h("h1", {}, "Service ", h("span", { class: "code" }, name), " ", h("span", { id: "svc-status" })));
    const body = h("div", { id: "service" });
    main.append(body);
    async function refresh() {
      const s = await getBody("tcp/services/" + enc(name));
      swap(document.getElementById("svc-status"), badge(s.status));
      const parts = [problems(s.error)];
      const st = s.serverStatus || {};
      const caps = {};
      for (const c of (s.capacity && s.capacity.servers) || []) caps[c.address] = c;
      if (s.loadBalancer) {
        const lb = s.loadBalancer;
        parts.push(h("dl", { class: "kv" },
          h("dt", {}, "Type"), h("dd", {}, "load balancer"),
          h("dt", {}, "PROXY protocol to servers"), h("dd", {}, lb.proxyProtocol ? "version " + (lb.proxyProtocol.version || 2) : "no"),
          h("dt", {}, "Termination delay"), h("dd", {}, lb.terminationDelay != null ? String(lb.terminationDelay) : "default"),
          h("dt", {}, "Health check"), h("dd", {}, lb.healthCheck ? h("span", { class: "code" }, JSON.stringify(lb.healthCheck)) : "none"),
          h("dt", {}, "Used by"), h("dd", {}, (s.usedBy || []).map((r, i) => [i ? ", " : "", link("routers", r)]))));
        parts.push(h("h2", {}, "Servers"), table(null, ["Address", "Health", { label: "Open", num: true }, { label: "maxConn", num: true }, "Load", "TLS"],
          (lb.servers || []).map((sv) => {
            const c = caps[sv.address];
            const health = st[sv.address];
            return h("tr", {}, td(sv.address, "code"), td(health ? badge(health === "UP" ? "up" : "down", health) : "–"),
              num(c ? c.open : null), num(sv.maxConn || null), td(c && c.max ? meter(c.open, c.max) : "–"), td(sv.tls ? "yes" : "no"));
          }), { id: "servers-table" }));
      } else if (s.weighted) {
        const ws = s.weighted.services || [];
        const total = ws.reduce((a, w) => a + (w.weight == null ? 1 : w.weight), 0) || 1;
        parts.push(h("dl", { class: "kv" }, h("dt", {}, "Type"), h("dd", {}, "weighted"),
          h("dt", {}, "Used by"), h("dd", {}, (s.usedBy || []).map((r, i) => [i ? ", " : "", link("routers", r)]))));
        parts.push(h("h2", {}, "Services and weights"), table(null, ["Service", { label: "Weight", num: true }, "Share"],
          ws.map((w) => {
            const wt = w.weight == null ? 1 : w.weight;
            return h("tr", {}, td(link("services", qualify(w.name, name))), num(wt), td([meter(wt, total), " ", Math.round((100 * wt) / total) + " %"]));
          })));
      }
      if (s.capacity) {
        const c = s.capacity;
        parts.push(h("h2", {}, "Queue"), h("dl", { class: "kv", id: "queue" },
          h("dt", {}, "Waiting"), h("dd", {}, [fmtInt(c.queued), " of ", fmtInt(c.queueMaxSize), " ", meter(c.queued, c.queueMaxSize)]),
          h("dt", {}, "Clients waiting"), h("dd", {}, fmtInt(c.queuedClients)),
          h("dt", {}, "Timeout"), h("dd", {}, c.queueTimeout),
          h("dt", {}, "Refused: queue full"), h("dd", {}, fmtInt(c.queueFullTotal)),
          h("dt", {}, "Refused: waited too long"), h("dd", {}, fmtInt(c.queueTimeoutTotal)),
          h("dt", {}, "Evicted"), h("dd", {}, fmtInt(c.queueEvictedTotal))));
      }
      swap(body, parts);
    }
    return { refresh };
  }

  async function middlewareDetail(main, p) {
    const name = p[0];
    const m0 = await getBody("tcp/middlewares/" + enc(name));
    const type = String(m0.type || "").toLowerCase();
    main.append(h("h1", {}, typeName(m0.type), " ", h("span", { class: "code" }, name), " ", badge(m0.status)));
    main.append(problems(m0.error));
    const cfgKey = Object.keys(m0).find((k) => ["inflightconn", "ipallowlist", "ipwhitelist", "ratelimit"].includes(k.toLowerCase()) && typeof m0[k] === "object");
    main.append(h("dl", { class: "kv" },
      h("dt", {}, "Configuration"), h("dd", {}, cfgKey ? h("span", { class: "code" }, JSON.stringify(m0[cfgKey])) : "–"),
      h("dt", {}, "Used by"), h("dd", {}, (m0.usedBy || []).length ? m0.usedBy.map((r, i) => [i ? ", " : "", link("routers", r)]) : "no router"),
      h("dt", {}, "Provider"), h("dd", {}, m0.provider || providerOf(name))));
    const live = h("div", { id: "live-view" });
    main.append(live);
    if (!["inflightconn", "ratelimit", "ipallowlist", "ipwhitelist"].includes(type) || m0.status === "disabled") {
      live.append(h("p", { class: "muted" }, "No live state: " + (m0.status === "disabled" ? "the middleware is disabled." : "it counts nothing per client.")));
      return null;
    }
    async function refresh() {
      const hq = "history?middleware=" + enc(name);
      const parts = [];
      if (type === "inflightconn") {
        const [cl, hist, ref] = await Promise.all([getBody("tcp/middlewares/" + enc(name) + "/clients?top=20"), getBody(hq),
          getBody("tcp/middlewares/" + enc(name) + "/refused?since=1m&top=20")]);
        const mh = (hist.middlewares || {})[name] || { admitted: [], refused: [], inFlight: [], clients: [] };
        const atLimit = (cl.topClients || []).filter((c) => c.count >= cl.amount).length;
        parts.push(h("div", { class: "cards" },
          stat("In flight", cl.inFlight, "connections counted now"),
          stat("Clients", cl.distinctIPs, "distinct client IPs with a connection"),
          stat("Amount", cl.amount, "connections per client IP" + (cl.dryRun ? " (dry run: nothing is refused)" : "")),
          stat("At their limit", atLimit + (atLimit === 20 ? "+" : ""), "clients holding the amount now"),
          stat("Refused", cl.rejectedTotal, "in all (an upgrade in place carries it over)")));
        if (m0.store) {
          const s = (await getBody("tcp/middlewares/" + enc(name))).store;
          if (s) parts.push(h("p", {}, "Shared store ", h("strong", {}, s.name), ": ", s.reachable ? badge("ok", "reachable") : badge("error", "unreachable"),
            ` failureMode ${s.failureMode}; ${fmtInt(s.rejectedUnreachableTotal)} refused while unreachable, ${fmtInt(s.fallbacksTotal)} admitted by the per-replica amount.`));
        }
        parts.push(h("div", { class: "charts" },
          chart("Admitted and refused per second", [{ label: "admitted", color: palette[2], values: mh.admitted }, { label: "refused", color: palette[1], values: mh.refused }]),
          chart("Connections in flight", [{ label: "in flight", color: palette[0], values: mh.inFlight || [] }, { label: "clients", color: palette[3], values: mh.clients || [] }], { unit: "", gauge: true })));
        parts.push(h("h2", {}, "Top clients by open connections"),
          table(`The clients holding most connections now, against the amount (${cl.amount}).`, ["Client IP", { label: "Connections", num: true }, "Of the amount", "Refusals"],
            (cl.topClients || []).map((c) => h("tr", { "data-ip": c.ip }, td(c.ip, "code"), num(c.count),
              td([meter(c.count, cl.amount), " ", c.count >= cl.amount ? badge("error", "at limit") : ""]), td(whyLink(c.ip)))),
            { id: "top-clients", empty: "No client holds a connection." }));
        parts.push(refusedClients(ref));
      } else if (type === "ratelimit") {
        const [cl, hist, ref] = await Promise.all([getBody("tcp/middlewares/" + enc(name) + "/clients?top=20"), getBody(hq),
          getBody("tcp/middlewares/" + enc(name) + "/refused?since=1m&top=20")]);
        const mh = (hist.middlewares || {})[name] || { admitted: [], refused: [] };
        parts.push(h("div", { class: "cards" },
          stat("Rule", `${cl.average} per ${fmtDuration(cl.period)}`, `burst ${cl.burst}` + (cl.dryRun ? " (dry run: nothing is refused)" : "")),
          stat("Clients", cl.distinctIPs, "client IPs whose bucket is not full"),
          stat("Refused (1 min)", ref.refused, `from ${plural(ref.clients, "client", "clients")}`),
          stat("Refused", cl.rejectedTotal, "in all (an upgrade in place carries it over)")));
        parts.push(h("div", { class: "charts" },
          chart("Admitted and refused per second", [{ label: "admitted", color: palette[2], values: mh.admitted }, { label: "refused", color: palette[1], values: mh.refused }])));
        parts.push(refusedClients(ref));
        parts.push(h("h2", {}, "Buckets not full"), table("The clients that may open fewest connections now.", ["Client IP", { label: "May open now", num: true }, "Full again in"],
          (cl.topClients || []).map((c) => h("tr", {}, td(ipLink(c.ip)), num(c.available), td(fmtDuration(c.fullIn)))), { empty: "Every bucket is full." }));
      } else {
        const [hist, ref] = await Promise.all([getBody(hq), getBody("tcp/middlewares/" + enc(name) + "/refused?since=1m&top=20")]);
        const mh = (hist.middlewares || {})[name] || { admitted: [], refused: [] };
        parts.push(h("div", { class: "charts" },
          chart("Allowed and denied per second", [{ label: "allowed", color: palette[2], values: mh.admitted }, { label: "denied", color: palette[1], values: mh.refused }])));
        parts.push(refusedClients(ref));
      }
      swap(live, parts);
    }
    return { refresh };
  }

  // fmtDuration shows a duration the API wrote as Go does ("1m0s",
  // "21.556464007s") or as nanoseconds: "1 min", "21.6 s".
  function fmtDuration(v) {
    let sec = typeof v === "number" ? v / 1e9 : 0;
    if (typeof v === "string") {
      const units = { h: 3600, m: 60, s: 1, ms: 1e-3, "µs": 1e-6, us: 1e-6, ns: 1e-9 };
      for (const [, n, u] of v.matchAll(/([\d.]+)(h|ms|m|s|µs|us|ns)/g)) sec += parseFloat(n) * units[u];
    }
    if (sec >= 3600) {
      const h = Math.floor(sec / 3600), m = Math.round((sec - 3600 * h) / 60);
      return m ? `${h} h ${m} min` : `${h} h`;
    }
    if (sec >= 60) {
      const m = Math.floor(sec / 60), r = Math.round(sec - 60 * m);
      return r ? `${m} min ${r} s` : `${m} min`;
    }
    return sec >= 10 || Number.isInteger(sec) ? `${Math.round(sec)} s` : `${sec.toFixed(1)} s`;
  }
  function stat(label, value, note) {
    return h("article", { class: "card" }, h("h3", {}, label), h("p", { class: "big" }, typeof value === "number" ? fmtInt(value) : value), h("p", { class: "muted" }, note));
  }
  function refusedClients(ref) {
    return [h("h2", {}, "Clients refused in the last minute"),
      table(`${plural(ref.refused, "refusal", "refusals")} of ${plural(ref.clients, "client", "clients")} in the last ${fmtDuration(ref.window)}, most refused first.`,
        ["Client IP", { label: "Refused", num: true }, { label: "Per second", num: true }, "Last", "Reason"],
        (ref.topClients || []).map((c) => h("tr", { "data-ip": c.clientIP }, td(ipLink(c.clientIP)), num(c.refused), td(fmtRate(c.perSecond), "num"),
          td(ago(c.lastRefused)), td(reasonLabel(c.reason)))), { id: "refused-clients", empty: "Nobody was refused in the last minute." })];
  }

  // ----- why was this client refused? -----
  function refusalsTable(v, caption) {
    const rows = (v.refusals || []).map((e) => h("tr", { "data-reason": e.reason },
      td([h("time", { datetime: e.last }, fmtTime(e.last)), h("br"), h("span", { class: "muted" }, ago(e.last))]),
      td(ipLink(e.clientIP)),
      num(e.count),
      td(reasonLabel(e.reason)),
      td(e.entryPoint),
      td(e.router ? link("routers", e.router) : "–"),
      td(e.middleware ? link("middlewares", e.middleware) : e.service ? ["service ", link("services", e.service)] : "–"),
      td(e.message, "wrap")));
    return table(caption, ["When (last)", "Client IP", { label: "Times", num: true }, "Reason", "Entry point", "Router", "Middleware", "Message"], rows,
      { id: "refusals-table", empty: "No refusal in the record matches." });
  }

  async function refusals(main, _p, query) {
    main.append(h("h1", {}, "Why was this client refused?"),
      h("p", { class: "note" }, "Enter a client IP (or a prefix such as 10.0.0.0/24) to see which router and middleware refused it recently, when, and why. " +
        "The record keeps the latest refusals of this process; a client's repeats within a second are one entry with a count."));
    const ip = h("input", { id: "ip", name: "ip", value: query.get("ip") || "", placeholder: "203.0.113.7", autocomplete: "off", spellcheck: "false", inputmode: "text" });
    const since = h("select", { id: "since" }, [["", "any time"], ["5m", "last 5 minutes"], ["1h", "last hour"]].map(([v, t]) =>
      h("option", { value: v, selected: (query.get("since") || "") === v ? true : null }, t)));
    const reason = h("select", { id: "reason" }, h("option", { value: "" }, "any"), reasonOrder.map((r) =>
      h("option", { value: r, selected: query.get("reason") === r ? true : null }, reasonLabel(r))));
    const form = h("form", { class: "toolbar", role: "search", id: "why-form" },
      h("label", { for: "ip" }, "Client IP or prefix", ip),
      h("label", { for: "since" }, "When", since),
      h("label", { for: "reason" }, "Reason", reason),
      h("button", { type: "submit" }, "Look up"));
    const summary = h("p", { id: "why-summary", "aria-live": "polite" });
    const out = h("div", { id: "why" });
    main.append(form, summary, out);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      refresh().catch((err) => swap(out, errorBox(err)));
    });
    async function refresh() {
      const q = new URLSearchParams({ limit: "200" });
      const v = ip.value.trim();
      if (v) q.set("ip", v);
      if (since.value) q.set("since", since.value);
      if (reason.value) q.set("reason", reason.value);
      replaceQuery({ ip: v, since: since.value, reason: reason.value });
      let res;
      try {
        res = await getBody("refusals?" + q);
      } catch (err) {
        if (err instanceof APIError && err.status === 400) { // a typo in the field: say so, do not mark the API down
          summary.textContent = err.message;
          swap(out);
          return;
        }
        throw err;
      }
      summary.textContent = v
        ? (res.matched ? `${plural(res.matched, "entry", "entries")} for ${v} in the record` + (res.matched > res.refusals.length ? ` (the latest ${res.refusals.length} shown)` : "") + "."
          : `${v} is not in the record: not refused since the record's oldest entry (it keeps the latest ${fmtInt(res.size)}; ${fmtInt(res.recordedTotal)} refusals recorded since the start).`)
        : `The latest refusals of every client (${fmtInt(res.recordedTotal)} recorded since the start; the record keeps the latest ${fmtInt(res.size)} entries).`;
      swap(out, refusalsTable(res, null));
    }
    return { refresh };
  }

  // ----- certificates -----
  async function certificates(main, _p, query) {
    main.append(h("h1", {}, "TLS certificates"),
      h("p", { class: "note" }, "The default TLS store's certificates and what the certificate resolvers hold, soonest expiry first."));
    const search = h("input", { type: "search", id: "cert-search", value: query.get("search") || "", autocomplete: "off" });
    main.append(h("div", { class: "toolbar", role: "search" }, h("label", { for: "cert-search" }, "Search by name or issuer", search)));
    const out = h("div", { id: "certs" });
    main.append(out);
    const certs = (await getBody("tls/certificates")) || [];
    certs.sort((a, b) => String(a.notAfter || "9").localeCompare(String(b.notAfter || "9")));
    function render() {
      const q = search.value.trim().toLowerCase();
      replaceQuery({ search: search.value.trim() });
      const rows = certs.filter((c) => !q || [c.subject, c.issuer, ...(c.sans || [])].join(" ").toLowerCase().includes(q)).map((c) => {
        let st = null;
        if (c.error) st = badge("error", "error");
        else if (c.notAfter) {
          const days = Math.floor((new Date(c.notAfter).getTime() - Date.now()) / 86400000);
          st = days < 0 ? badge("expired", "expired") : days < 30 ? badge("expiring", `${days} days left`) : badge("ok", `${days} days left`);
        }
        return h("tr", {}, td(c.subject || "–", "wrap"), td([...new Set(c.sans || [])].join(", "), "wrap"), td(c.issuer || "–", "wrap"),
          td([fmtTime(c.notAfter), " ", st]), td((c.usedBy || []).map((r, i) => [i ? ", " : "", link("routers", r)])),
          td(c.resolver ? "resolver " + c.resolver : c.generated ? "generated" : c.source || ""), td(c.error || "", "wrap"));
      });
      swap(out, table(`${rows.length} of ${certs.length} certificates.`, ["Subject", "Names", "Issuer", "Expires", "Used by", "Source", "Error"], rows,
        { id: "certs-table", empty: "No certificate: no router terminates TLS." }));
    }
    search.addEventListener("input", render);
    render();
    return null;
  }

  // ---------- routing and refresh ----------
  const routes = [
    [/^\/?$/, overview, "Overview"],
    [/^\/limiters$/, limiters, "Limiters"],
    [/^\/refusals$/, refusals, "Refusals"],
    [/^\/routers$/, listPage("routers"), "Routers"],
    [/^\/routers\/(.+)$/, routerDetail, "Routers"],
    [/^\/services$/, listPage("services"), "Services"],
    [/^\/services\/(.+)$/, serviceDetail, "Services"],
    [/^\/middlewares$/, listPage("middlewares"), "Middlewares"],
    [/^\/middlewares\/(.+)$/, middlewareDetail, "Middlewares"],
    [/^\/certificates$/, certificates, "Certificates"],
  ];

  const main = document.getElementById("main");
  const liveText = document.getElementById("live-text");
  const liveBox = document.getElementById("live");
  const pause = document.getElementById("pause");
  let current = null; // {refresh}
  let gen = 0;

  function announce(text) { document.getElementById("announce").textContent = text; }

  // replaceQuery writes a page's state into the address, without a new
  // history entry and without reloading the page.
  function replaceQuery(obj) {
    const [path] = location.hash.slice(1).split("?");
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(obj)) if (v !== "" && v != null) q.set(k, v);
    const s = q.toString();
    history.replaceState(null, "", "#" + (path || "/") + (s ? "?" + s : ""));
  }

  async function navigate(initial) {
    const my = ++gen;
    const [path, qs] = location.hash.slice(1).split("?");
    const query = new URLSearchParams(qs || "");
    let page = null, params = [], section = "";
    for (const [re, fn, sec] of routes) {
      const m = (path || "/").match(re);
      if (m) {
        page = fn;
        section = sec;
        params = m.slice(1).map((x) => { try { return decodeURIComponent(x); } catch (_) { return x; } });
        break;
      }
    }
    current = null;
    main.replaceChildren();
    for (const a of document.querySelectorAll(".top nav a")) {
      if (a.textContent === section) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    if (!page) {
      main.append(h("h1", {}, "Not found"), h("p", {}, "No such page: ", h("span", { class: "code" }, path), ". ", h("a", { href: "#/" }, "Overview")));
      return;
    }
    try {
      const ctl = await page(main, params, query);
      if (my !== gen) return;
      if (ctl && ctl.refresh) {
        await ctl.refresh(); // a first failure is the page's: said on it, and not tried again
        if (my !== gen) return;
        updated();
      }
      current = ctl;
    } catch (err) {
      if (my !== gen) return;
      main.append(errorBox(err));
    }
    const h1 = main.querySelector("h1");
    document.title = (h1 ? h1.textContent + " · " : "") + "tollgate dashboard";
    if (!initial && h1) { h1.setAttribute("tabindex", "-1"); h1.focus(); }
  }

  function updated() {
    liveText.textContent = pause.getAttribute("aria-pressed") === "true" ? "paused" : "updated " + new Date().toLocaleTimeString(undefined, { hour12: false });
    liveBox.classList.remove("stale");
  }

  let busy = false;
  async function tick(force) {
    if (!current || !current.refresh || busy) return;
    if (!force && (pause.getAttribute("aria-pressed") === "true" || document.hidden)) return;
    busy = true;
    const my = gen;
    try {
      await current.refresh();
      if (my === gen) updated();
    } catch (err) {
      if (my === gen) {
        liveText.textContent = "API unreachable: " + err.message;
        liveBox.classList.add("stale");
      }
    } finally {
      busy = false;
    }
  }

  document.querySelector(".skip").addEventListener("click", (e) => {
    e.preventDefault(); // the address's hash is the page's route
    main.focus();
  });
  pause.addEventListener("click", () => {
    const on = pause.getAttribute("aria-pressed") !== "true";
    pause.setAttribute("aria-pressed", String(on));
    pause.textContent = on ? "Resume" : "Pause";
    if (!on) tick(true);
    else liveText.textContent = "paused";
  });
  window.addEventListener("hashchange", () => navigate(false));
  setInterval(() => tick(false), 2000);
  navigate(true);
})();
