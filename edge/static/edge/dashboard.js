// The live pool dashboard: polls the staff-only JSON feed and keeps its tables current.
// Rows are keyed by id and a cell is rebuilt only when what it shows changed, so a fleet of
// thousands of providers costs the browser little per poll.
"use strict";

(function () {
  const root = document.getElementById("dashboard");
  const feedUrl = root.dataset.feedUrl;
  const mirrorUrl = root.dataset.mirrorUrl;
  const FETCH_TIMEOUT_MS = 10000;
  // The feed says how long to wait before the next poll (longer on a very large pool).
  let pollMs = 1000;
  let revision = null;
  let scrolled = false;
  let filtered = "";
  const orders = {}; // per table: the row ids in the order last shown

  // -- cells: plain specs (text, class, link, bar), compared as JSON before repainting ---------

  function mirror(kind, id) {
    return mirrorUrl.replace("KIND", kind).replace("KEY", encodeURIComponent(id));
  }

  function link(kind, id) {
    return { text: id, href: mirror(kind, id) };
  }

  function badge(text, tone) {
    return { text: text, cls: "badge " + tone };
  }

  function bar(value, max) {
    return { bar: [value, max] };
  }

  function shortRevision(value) {
    if (!value) return "-";
    const parts = value.split(":");
    return parts.length === 2 ? parts[0] + ":" + parts[1].slice(0, 12) + "…" : value;
  }

  function when(epochSeconds) {
    if (epochSeconds === null) return { text: "-", cls: "muted" };
    const at = new Date(epochSeconds * 1000);
    const shown = at.toLocaleString(undefined, { timeZoneName: "short" });
    return { text: shown + " (" + age(Date.now() / 1000 - epochSeconds) + ")", title: at.toISOString() };
  }

  function age(seconds) {
    if (seconds < 90) return Math.max(0, Math.round(seconds)) + " s";
    if (seconds < 5400) return Math.round(seconds / 60) + " min";
    if (seconds < 172800) return Math.round(seconds / 3600) + " h";
    return Math.round(seconds / 86400) + " d";
  }

  function paint(td, spec) {
    const key = JSON.stringify(spec);
    if (td.dataset.key === key) return;
    td.dataset.key = key;
    td.replaceChildren();
    td.className = spec.td || "";
    td.title = spec.title || "";
    if (spec.bar) {
      const [value, max] = spec.bar;
      const outer = document.createElement("span");
      outer.className = "bar" + (value >= max ? " full" : "");
      const inner = document.createElement("span");
      inner.style.width = (max > 0 ? Math.min(100, (100 * value) / max) : 0) + "%";
      outer.append(inner);
      td.append(outer, value + " / " + max);
      return;
    }
    for (const part of spec.parts || [spec]) {
      let node;
      if (part.href) {
        node = document.createElement("a");
        node.href = part.href;
      } else {
        node = document.createElement("span");
      }
      if (part.cls) node.className = part.cls;
      node.textContent = part.text;
      td.append(node, " ");
    }
  }

  // -- the four tables -----------------------------------------------------------------------

  function nodeCells(n) {
    let session = badge("not connected", "bad");
    if (n.connected) session = n.ready ? badge("ready", "good") : badge("connected, not ready", "warn");
    let acked = { text: "-", cls: "muted" };
    if (n.acked_revision) {
      const current = n.acked_revision === revision;
      acked = { parts: [{ text: shortRevision(n.acked_revision) },
        current ? badge("running", "good") : badge("behind", "warn")], title: n.acked_revision };
    }
    return [
      link("node", n.id),
      { text: n.alias || "" },
      session,
      acked,
      { text: n.agent_version || "-" },
      when(n.connected_since),
    ];
  }

  function providerCells(p) {
    let health = badge("healthy", "good");
    if (!p.node_ready) health = badge("node not ready", "bad");
    else if (!p.healthy) health = badge("unhealthy", "bad");
    const reasons = [health];
    if (p.health_detail) reasons.push({ text: p.health_detail, cls: "muted" });
    let passive = badge("closed", "good");
    if (p.passive_state === "open") {
      passive = { parts: [badge("open", "bad"), { text: p.passive_reason + ", half-open in " + age(p.reopens_in_s) }] };
    } else if (p.passive_state === "half_open") {
      passive = { parts: [badge("half-open", "warn"), { text: p.passive_reason }] };
    } else if (p.recent_failures) {
      passive = { parts: [passive, { text: p.recent_failures + " recent failure(s)", cls: "muted" }] };
    }
    const name = p.listed ? link("provider", p.id) : { parts: [link("provider", p.id), badge("draining", "warn")] };
    return [
      { ...name, td: "provider" },
      link("node", p.node),
      p.enabled ? badge("yes", "good") : badge("no", "warn"),
      { ...bar(p.in_flight, p.capacity), td: "in-flight" },
      p.long_slots === null ? { text: p.long_in_flight + " (no limit)", cls: "muted" } : bar(p.long_in_flight, p.long_slots),
      { parts: reasons, td: "detail health" },
      { ...passive, td: "passive" },
    ];
  }

  function modelCells(m) {
    return [
      link("model", m.id),
      m.queue_depth ? badge(String(m.queue_depth), "warn") : { text: "0", cls: "muted" },
      { text: String(m.long_queue_depth), cls: m.long_queue_depth ? "" : "muted" },
      { text: m.queue_depth ? m.oldest_wait_s.toFixed(1) + " s" : "-", cls: m.queue_depth ? "" : "muted" },
      { parts: m.providers.map((id) => link("provider", id)), td: "detail" },
    ];
  }

  function budget(left) {
    return left === null ? { text: "-", cls: "muted" } : left ? { text: String(left) } : badge("0", "warn");
  }

  function principalCells(p) {
    return [
      { text: p.principal || "(anonymous)" },
      { text: String(p.in_flight), cls: p.in_flight ? "" : "muted" },
      p.queued ? badge(String(p.queued), "warn") : { text: "0", cls: "muted" },
      { text: String(p.admitted) },
      p.limited ? badge(String(p.limited), "warn") : { text: "0", cls: "muted" },
      budget(p.tokens_per_day_remaining),
      budget(p.tokens_per_month_remaining),
    ];
  }

  function refreshCells(r) {
    const tone = r.status === "ok" || r.status === "applied" ? "good" : "warn";
    return [
      { text: r.refresh_id, href: r.url },
      { text: r.mode },
      badge(r.status, tone),
      { text: r.requested_by },
      when(Date.parse(r.created_at) / 1000),
    ];
  }

  // Rows from a {columns, rows} table of the feed, as objects.
  function objects(table) {
    return table.rows.map((row) => Object.fromEntries(table.columns.map((c, i) => [c, row[i]])));
  }

  function render(tableId, kind, items, cells) {
    const body = document.querySelector("#" + tableId + " tbody");
    const seen = new Set();
    const order = [];
    for (const item of items) {
      const id = kind ? kind + "-" + item.id : tableId + "-" + item.refresh_id;
      seen.add(id);
      order.push(id);
      let tr = document.getElementById(id);
      const specs = cells(item);
      if (!tr) {
        tr = document.createElement("tr");
        tr.id = id;
        for (let i = 0; i < specs.length; i++) tr.append(document.createElement("td"));
        body.append(tr);
      }
      specs.forEach((spec, i) => paint(tr.children[i], spec));
    }
    for (const tr of Array.from(body.children)) if (!seen.has(tr.id)) tr.remove();
    const joined = order.join("\n");
    if (orders[tableId] !== joined) {
      orders[tableId] = joined;
      for (const id of order) body.append(document.getElementById(id));
    }
  }

  function applyFilter() {
    const needle = document.getElementById("providers-filter").value.trim().toLowerCase();
    if (needle === "" && filtered === "") return; // new rows show by default
    filtered = needle;
    for (const tr of document.querySelectorAll("#providers tbody tr")) {
      const text = tr.children[0].textContent + " " + tr.children[1].textContent;
      tr.hidden = needle !== "" && !text.toLowerCase().includes(needle);
    }
  }

  function show(data) {
    revision = data.revision;
    document.getElementById("edge-id").textContent = data.edge;
    const running = document.getElementById("running-revision");
    running.textContent = shortRevision(data.revision);
    running.title = data.revision;
    const nodes = objects(data.nodes);
    const providers = objects(data.providers);
    const models = objects(data.models);
    render("nodes", "node", nodes, nodeCells);
    render("providers", "provider", providers, providerCells);
    render("models", "model", models, modelCells);
    render("refreshes", null, data.refreshes, refreshCells);
    const principals = objects(data.principals).map((p) => ({ ...p, id: p.principal }));
    render("principals", "principal", principals, principalCells);
    const limited = principals.reduce((sum, p) => sum + p.limited, 0);
    document.getElementById("principals-count").textContent =
      principals.length + ", " + limited + " limited";
    const ready = nodes.filter((n) => n.ready).length;
    document.getElementById("nodes-count").textContent = ready + " of " + nodes.length + " ready";
    const busy = providers.reduce((sum, p) => sum + p.in_flight, 0);
    const capacity = providers.reduce((sum, p) => sum + p.capacity, 0);
    document.getElementById("providers-count").textContent =
      providers.length + ", " + busy + " of " + capacity + " slots in flight";
    const queued = models.reduce((sum, m) => sum + m.queue_depth, 0);
    document.getElementById("models-count").textContent = models.length + ", " + queued + " queued";
    applyFilter();
    if (!scrolled && location.hash) {
      scrolled = true;
      const target = document.getElementById(decodeURIComponent(location.hash.slice(1)));
      if (target) target.scrollIntoView({ block: "center" });
    }
  }

  function state(text, tone) {
    const element = document.getElementById("feed-state");
    element.textContent = text;
    element.className = tone;
  }

  // -- polling: one request at a time, paused while the tab is hidden ------------------------

  async function poll() {
    try {
      const response = await fetch(feedUrl, {
        credentials: "same-origin",
        cache: "no-store",
        signal: AbortSignal.timeout(FETCH_TIMEOUT_MS),
      });
      if (response.status === 403) {
        state("Not updating: your admin session has ended. Reload the page to log in again.", "badge bad");
        return;
      }
      if (!response.ok) throw new Error("the Edge answered " + response.status);
      const data = await response.json();
      pollMs = data.poll_ms;
      show(data);
      const at = new Date(data.generated_at * 1000).toLocaleTimeString(undefined, { timeZoneName: "short" });
      state("Updated " + at + " (every " + pollMs / 1000 + " s)", "muted");
    } catch (error) {
      state("Not updating: " + error.message + "; retrying", "badge warn");
    }
    schedule();
  }

  function schedule() {
    if (document.hidden) {
      document.addEventListener("visibilitychange", poll, { once: true });
    } else {
      setTimeout(poll, pollMs);
    }
  }

  document.getElementById("providers-filter").addEventListener("input", applyFilter);
  poll();
})();
