// The status page's live part: refresh the tables and the rings from
// debug/ring, upstreams and metrics, reload the page when a ring's version
// changes, and answer the lookup boxes from debug/lookup. The server
// rendered the page complete; this only updates it. URLs are relative to
// the page.
//
// A one-pool page is one section, the whole page. A page with several
// pools (body data-multi) has a section element per pool shown, whose ids
// carry its prefix (data-id): every ring query names its pool, and only
// that pool's series and states go into it.
(function () {
  "use strict";
  var GREY = document.body.getAttribute("data-grey");
  var body = document.body;
  var multi = body.hasAttribute("data-multi");
  // The one pool a page of several shows (?pool=), which a request
  // lookup without a host goes to.
  var only = body.getAttribute("data-pool-shown") || "";
  var every = parseInt(body.getAttribute("data-refresh"), 10) || 1500;
  // What the server rendered: a change in either needs a fresh render
  // (ejection times and reasons, the last reload's result come from it).
  var renderedReloads = body.getAttribute("data-reloads");

  // section gathers the parts of one pool's section (root): its pool
  // ("" on a one-pool page), id prefix, the version and available
  // upstreams it was rendered with, its ring's geometry and marker, and
  // per upstream name its row, arc, hatch and clip circle.
  function section(root, pool, id) {
    var svg = document.getElementById(id + "ring");
    var s = {
      pool: pool, id: id, root: root, ups: {},
      version: root.getAttribute("data-version"),
      available: root.getAttribute("data-available"),
      C: svg.viewBox.baseVal.width / 2,
      arcR: parseFloat(svg.getAttribute("data-radius")),
      width: parseFloat(svg.getAttribute("data-width")),
      marker: document.getElementById(id + "marker")
    };
    root.querySelectorAll("tr.up").forEach(function (tr) {
      var i = tr.id.slice((id + "row-").length);
      s.ups[tr.getAttribute("data-upstream")] = {
        row: tr,
        arc: document.getElementById(id + "arc-" + i),
        color: tr.querySelector("rect").getAttribute("fill"),
        hatch: document.getElementById(id + "hatch-arc-" + i),
        clip: document.getElementById(id + "clip-circle-" + i)
      };
    });
    return s;
  }
  var sections = multi ? Array.prototype.map.call(document.querySelectorAll("section.pool"), function (e) {
    return section(e, e.getAttribute("data-pool"), e.getAttribute("data-id"));
  }) : [section(body, "", "")];
  function sectionOf(pool) {
    return sections.filter(function (s) { return s.pool === (multi ? pool : ""); })[0];
  }

  // state classifies an upstream as status.go's upstreamState does.
  function state(u) {
    if (u.absent) return ["ejected", "absent from the answer"];
    if (!u.available) {
      var why = [];
      if (u.health === "down") why.push("health");
      if (u.breaker === "open") why.push("breaker");
      return ["ejected", why.length ? "ejected (" + why.join(", ") + ")" : "ejected"];
    }
    if (u.active_fraction < 1) return ["slow-start", "slow start " + pct(u.active_fraction)];
    return ["available", "available"];
  }

  // adminText says an admin state as status.go's adminText does.
  function adminText(state, drained, hold) {
    if (state === "drain" && !hold) return "drain (hold off: keys in use not kept)";
    return state === "drain" && drained ? "drain (drained)" : state;
  }

  // renderAdmin shows an upstream's admin state (u from upstreams, with
  // drained and held_keys, or from debug/ring, without) and enables the
  // buttons for the other two states.
  function renderAdmin(e, u) {
    if (u.held_keys !== undefined) e.drained = u.drained;
    var hold = u.hold !== undefined ? u.hold : holdOf(e.row);
    setText(e.row, "admin", adminText(u.state, u.state === "drain" && e.drained, hold));
    e.row.className = e.row.className.replace(/ admin-\S+/g, "") + (u.state !== "ready" ? " admin-" + u.state : "");
    e.row.querySelectorAll("form.set-state button").forEach(function (b) { b.disabled = b.value === u.state; });
    var held = e.row.querySelector('[data-f="held"]');
    if (u.held_keys !== undefined && held.textContent !== "–") setText(e.row, "held", String(u.held_keys));
  }

  // holdOf says whether hold is on in the pool of an element of its
  // upstreams table (the server renders it on the table).
  function holdOf(el) { return el.closest("table").getAttribute("data-hold") === "true"; }

  function pct(f) { return (f * 100).toFixed(1) + "%"; }
  function num(f) { return String(Math.round(f * 1000) / 1000); }

  function setText(row, field, text) {
    var td = row.querySelector('[data-f="' + field + '"]');
    if (td && td.textContent !== text) td.textContent = text;
  }

  function noCounts() { return { requests: {}, errors: {}, overflows: {}, sum: {}, count: {}, holdKeys: 0, held: 0 }; }

  // parseMetrics reads, from the Prometheus text format, reloads, the sum
  // of ringlb_config_reloads_total, and by pool (its pool label on a page
  // of several, "" for every series on a one-pool page) and upstream:
  // requests (ringlb_requests_total over codes), errors (its 5xx codes),
  // overflows, and the request duration's sum and count.
  function parseMetrics(text) {
    var out = { reloads: 0, pools: {} };
    var sample = /^(ringlb_[a-z_]+)(?:\{(.*)\})? (\S+)/;
    var label = /(?:^|,)upstream="((?:[^"\\]|\\.)*)"/;
    var poolLabel = /(?:^|,)pool="([^"]*)"/;
    var into = {
      ringlb_requests_total: "requests", ringlb_overflow_total: "overflows",
      ringlb_request_duration_seconds_sum: "sum", ringlb_request_duration_seconds_count: "count"
    };
    text.split("\n").forEach(function (line) {
      var m = sample.exec(line);
      if (!m) return;
      var v = parseFloat(m[3]);
      if (m[1] === "ringlb_config_reloads_total") { out.reloads += v; return; }
      var p = multi ? (poolLabel.exec(m[2] || "") || [])[1] || "" : "";
      var pc = out.pools[p] || (out.pools[p] = noCounts());
      if (m[1] === "ringlb_hold_keys") { pc.holdKeys = v; return; }
      if (m[1] === "ringlb_held_total") { pc.held = v; return; }
      if (!into[m[1]]) return;
      var l = label.exec(m[2] || "");
      if (!l) return;
      var name = l[1].replace(/\\(.)/g, function (_, c) { return c === "n" ? "\n" : c; });
      var by = pc[into[m[1]]];
      by[name] = (by[name] || 0) + v;
      if (m[1] === "ringlb_requests_total" && /(?:^|,)code="5\d\d"/.test(m[2])) pc.errors[name] = (pc.errors[name] || 0) + v;
    });
    return out;
  }

  function latency(sum, count) {
    if (!count) return "–";
    var ms = 1000 * sum / count;
    return (ms < 10 ? ms.toFixed(2) : ms.toFixed(0)) + " ms";
  }

  // ago formats milliseconds as status.go's ago does.
  function ago(ms) {
    var s = Math.round(ms / 1000);
    function two(n) { return (n < 10 ? "0" : "") + n; }
    if (s < 60) return s + "s";
    if (s < 3600) return Math.floor(s / 60) + "m" + two(s % 60) + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + two(Math.floor(s / 60) % 60) + "m";
    return Math.floor(s / 86400) + "d" + Math.floor(s / 3600) % 24 + "h";
  }

  // renderHold updates the hold line (present with hold on) as status.go
  // renders it: keys held, and the held share of the requests answered.
  function renderHold(s, counts) {
    var keys = document.getElementById(s.id + "hold-keys"), share = document.getElementById(s.id + "held-share");
    if (!keys || !share || !counts) return;
    var total = 0;
    Object.keys(counts.requests).forEach(function (n) { total += counts.requests[n]; });
    keys.textContent = String(counts.holdKeys);
    share.textContent = total ? (100 * counts.held / total).toFixed(1) + "%" : "–";
  }

  function render(s, ring, counts, states) {
    renderHold(s, counts);
    var avail = 0;
    ring.upstreams.forEach(function (u) {
      var e = s.ups[u.name];
      if (!e) return;
      var st = state(u);
      if (u.available) avail++;
      e.row.className = "up " + st[0];
      if (u.state) renderAdmin(e, (states && states[u.name]) || u);
      e.arc.setAttribute("class", "arc " + st[0]);
      e.arc.setAttribute("fill", u.available ? e.color : GREY);
      e.arc.setAttribute("stroke", u.available ? e.color : GREY);
      e.hatch.setAttribute("visibility", st[0] === "slow-start" ? "visible" : "hidden");
      var r = st[0] === "slow-start" ? s.arcR - s.width / 2 + s.width * u.active_fraction : s.arcR + s.width / 2 + 1;
      e.clip.setAttribute("r", num(r));
      setText(e.row, "state", st[1]);
      setText(e.row, "url", u.url);
      setText(e.row, "source", u.source);
      setText(e.row, "health", u.health);
      setText(e.row, "breaker", u.breaker);
      setText(e.row, "weight", num(u.weight));
      e.row.querySelector('[data-f="weight"]').title = u.points + " points on the ring";
      setText(e.row, "share", pct(u.share));
      setText(e.row, "inflight", String(u.inflight));
      if (counts) {
        setText(e.row, "requests", num(counts.requests[u.name] || 0));
        setText(e.row, "errors", num(counts.errors[u.name] || 0));
        setText(e.row, "latency", latency(counts.sum[u.name] || 0, counts.count[u.name] || 0));
        setText(e.row, "overflows", num(counts.overflows[u.name] || 0));
      }
    });
    var n = ring.upstreams.length;
    document.getElementById(s.id + "summary").textContent = avail + " of " + n + " upstreams available";
    document.getElementById(s.id + "centre-count").textContent = avail + "/" + n;
  }

  var live = document.getElementById("live");
  function setLive(ok, text) {
    live.className = "live " + (ok ? "ok" : "stale");
    live.textContent = text;
  }

  function getJSON(url) {
    return fetch(url, { cache: "no-store" }).then(function (r) {
      return r.json().then(function (v) {
        if (!r.ok) throw new Error(url + ": " + r.status + (v && v.error ? " " + v.error : ""));
        return v;
      });
    });
  }

  var busy = false;
  function refresh() {
    if (busy) return;
    busy = true;
    var metrics = fetch("metrics", { cache: "no-store" })
      .then(function (r) { return r.ok ? r.text() : ""; })
      .then(function (t) { return t ? parseMetrics(t) : null; }, function () { return null; });
    // states: by pool (as parseMetrics keys them), by upstream name.
    var states = getJSON("upstreams").then(function (v) {
      var by = {};
      Object.keys(v.pools).forEach(function (p) {
        var into = by[multi ? p : ""] || (by[multi ? p : ""] = {});
        v.pools[p].forEach(function (u) { into[u.name] = u; });
      });
      return by;
    }, function () { return null; });
    var rings = Promise.all(sections.map(function (s) {
      return getJSON("debug/ring" + (s.pool ? "?pool=" + encodeURIComponent(s.pool) : ""));
    }));
    Promise.all([rings, metrics, states]).then(function (res) {
      var changed = null;
      sections.forEach(function (s, i) {
        var ring = res[0][i];
        if (changed) return;
        if (ring.version !== s.version) {
          // New membership: the arcs come from samples of the old ring.
          changed = "ring " + (s.pool ? "of pool " + s.pool + " " : "") + "changed to " + ring.version + ", reloading";
          return;
        }
        var avail = ring.upstreams.filter(function (u) { return u.available; })
          .map(function (u) { return u.name + " "; }).join("");
        // An ejection or a return: the server renders since when and why.
        if (avail !== s.available) changed = "state changed, reloading";
      });
      // A reload attempt: the server renders its result.
      if (!changed && res[1] && String(res[1].reloads) !== renderedReloads) changed = "state changed, reloading";
      if (changed) {
        setLive(true, changed);
        location.reload();
        return;
      }
      var up = document.getElementById("uptime");
      if (up) up.textContent = ago(Date.now() - parseInt(up.getAttribute("data-started"), 10));
      sections.forEach(function (s, i) {
        render(s, res[0][i], res[1] && (res[1].pools[s.pool] || noCounts()), res[2] && (res[2][s.pool] || {}));
      });
      setLive(true, "live · " + new Date().toLocaleTimeString());
      body.setAttribute("data-refreshed", String(Date.now()));
      return lookup();
    }).catch(function (err) {
      setLive(false, "stale: " + err.message);
    }).then(function () { busy = false; });
  }

  // The Drain / Maint / Ready buttons: each asks first, then POSTs
  // upstreams/NAME/STATE with the page's own Origin (the admin listener
  // refuses another) and shows the answer. Without JavaScript the forms
  // POST by themselves, without asking.
  var questions = {
    drain: "Drain %s? It takes no new keys; keys in use stay on it until they go idle, and requests in flight finish.",
    drainNoHold: "Drain %s? Hold is off, so a drain keeps no key in use: it takes no new keys, and the next request of each key in use on it goes to another upstream. Requests in flight finish.",
    maint: "Put %s in maint? Every request goes elsewhere at once, keys in use included.",
    ready: "Make %s ready? It takes its keys back."
  };
  sections.forEach(function (s) { s.root.querySelectorAll("form.set-state").forEach(function (f) {
    f.addEventListener("submit", function (ev) {
      ev.preventDefault();
      var b = f.querySelector("button"), name = b.getAttribute("data-upstream"), st = b.value;
      var q = st === "drain" && !holdOf(f) ? questions.drainNoHold : questions[st];
      if (!window.confirm(q.replace("%s", name))) return;
      fetch(f.getAttribute("action"), { method: "POST", cache: "no-store" }).then(function (r) {
        return r.json().then(function (v) {
          if (!r.ok) throw new Error(r.status + (v && v.error ? " " + v.error : ""));
          if (s.ups[v.name]) renderAdmin(s.ups[v.name], v);
          setLive(true, (s.pool ? s.pool + "/" : "") + v.name + ": " + v.state);
        });
      }).catch(function (err) {
        setLive(false, name + " " + st + " failed: " + err.message);
      });
    });
  }); });

  // The key lookup box (a one-pool page's).
  var form = document.getElementById("lookup-form");
  var input = document.getElementById("key");
  var out = document.getElementById("lookup-result");
  var key = input ? input.value : "";

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  // chip shows upstream name in its colour in section s (grey when the
  // page has no section of the pool).
  function chip(s, name, cls, why) {
    var c = el("span", "chip" + (cls ? " " + cls : ""));
    var sw = el("i");
    sw.style.background = s && s.ups[name] ? s.ups[name].color : GREY;
    c.appendChild(sw);
    c.appendChild(document.createTextNode(name));
    if (why) c.appendChild(el("span", "why", why));
    c.setAttribute("data-upstream", name);
    return c;
  }

  function line(label, into) {
    var d = el("div", "line");
    d.appendChild(el("span", "label", label + " "));
    (into || out).appendChild(d);
    return d;
  }

  // showLookup shows a /debug/lookup answer in box (the key lookup's by
  // default), and marks the key on the ring of its pool's section; ids,
  // which the browser test reads, go to the key lookup's lines only
  // (prefix "lookup-"), or with prefix to the request's.
  function showLookup(res, box, prefix) {
    var s = sectionOf(res.pool);
    box = box || out;
    prefix = prefix || "lookup-";
    box.textContent = "";
    var sub = box === out ? undefined : box;
    // The first 8 hex digits are the top 32 bits of the position under
    // either placement (nginx's 32-bit hashes sit in the top half).
    var frac = parseInt(res.hash.slice(0, 8), 16) / 4294967296;
    var d = line("key", sub);
    d.appendChild(el("b", "key", res.key));
    d.appendChild(document.createTextNode(" hashes to "));
    d.appendChild(el("span", "hash", res.hash));
    d.appendChild(document.createTextNode(", " + pct(frac) + " of the way round the ring"));

    var o = line("owner", sub);
    o.id = prefix + "owner";
    o.appendChild(chip(s, res.owner));
    var c = line("chosen", sub);
    c.id = prefix + "chosen";
    if (res.chosen === null) {
      c.appendChild(el("span", "error", "none: a request with this key gets 503"));
    } else {
      c.appendChild(chip(s, res.chosen, "chosen"));
      if (res.chosen !== res.owner) c.appendChild(el("span", "", " (not the owner: see why below)"));
    }
    var why = {};
    res.skipped.forEach(function (s) { why[s.name] = s.reason; });
    var p = line("preference, clockwise", sub);
    p.id = prefix + "preference";
    res.preference.forEach(function (name, i) {
      if (i > 0) p.appendChild(el("span", "arrow", "→"));
      var cls = name === res.chosen ? "chosen" : (why[name] ? "skipped" : "");
      p.appendChild(chip(s, name, cls, why[name] ? " " + why[name] : ""));
    });
    sections.forEach(function (o) { o.marker.setAttribute("visibility", o === s ? "visible" : "hidden"); });
    if (s) s.marker.setAttribute("transform", "rotate(" + (frac * 360).toFixed(2) + " " + s.C + " " + s.C + ")");
  }

  function lookup() {
    if (!form) return Promise.resolve();
    if (key === "") {
      out.textContent = "";
      sections[0].marker.setAttribute("visibility", "hidden");
      return Promise.resolve();
    }
    var asked = key;
    return getJSON("debug/lookup?key=" + encodeURIComponent(asked)).then(function (res) {
      if (asked === key) showLookup(res);
    }, function (err) {
      out.textContent = "";
      out.appendChild(el("span", "error", "lookup failed: " + err.message));
    });
  }

  if (form) form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    key = input.value;
    var url = new URL(location.href);
    if (key === "") url.searchParams.delete("key"); else url.searchParams.set("key", key);
    history.replaceState(null, "", url);
    lookup();
  });

  // The request box: the key such a request yields (or, with several
  // pools, the key given), the pool the routes pick, and where it goes.
  var rform = document.getElementById("request-form");
  var rout = document.getElementById("request-result");
  var rhost = document.getElementById("req-host"), rkey = document.getElementById("req-key");
  rform.addEventListener("submit", function (ev) {
    ev.preventDefault();
    var q = new URLSearchParams();
    if (rhost && rhost.value.trim() !== "") q.set("host", rhost.value.trim());
    else if (only) q.set("pool", only);
    q.set("path", document.getElementById("req-path").value || "/");
    if (rkey && rkey.value !== "") q.set("key", rkey.value);
    document.getElementById("req-headers").value.split("\n").forEach(function (h) {
      if (h.trim() !== "") q.append("header", h.trim());
    });
    var ck = document.getElementById("req-cookies").value.trim();
    if (ck !== "") q.append("cookie", ck);
    getJSON("debug/lookup?" + q.toString()).then(function (res) {
      rout.textContent = "";
      if (res.pool) {
        var pl = el("div", "line");
        pl.id = "request-pool";
        pl.appendChild(el("span", "label", "pool "));
        var a = el("a", "pool", res.pool);
        a.href = sectionOf(res.pool) ? "#pool-" + res.pool : "?pool=" + encodeURIComponent(res.pool);
        pl.appendChild(a);
        rout.appendChild(pl);
      }
      if (res.key === null) {
        var d = el("div", "line");
        d.id = "request-key";
        d.appendChild(el("span", "label", "key "));
        d.appendChild(el("span", "error", "none: on_missing " + res.on_missing + " gives " + res.outcome));
        rout.appendChild(d);
        return;
      }
      var box = el("div");
      showLookup(res, box, "request-");
      var k = el("div", "line");
      k.id = "request-key";
      k.appendChild(el("span", "label", "key "));
      k.appendChild(el("b", "key", res.key));
      k.appendChild(document.createTextNode(res.source ? " from " + res.source : " as given"));
      rout.appendChild(k);
      rout.appendChild(box);
    }, function (err) {
      rout.textContent = "";
      rout.appendChild(el("span", "error", "lookup failed: " + err.message));
    });
  });
  // ?path=&header=&cookie= on the page's own URL fill the box and ask.
  // With several pools, ?host= and ?key= too.
  var pq = new URLSearchParams(location.search);
  if (pq.has("path") || pq.has("header") || pq.has("cookie") || (multi && (pq.has("host") || pq.has("key")))) {
    if (pq.has("path")) document.getElementById("req-path").value = pq.get("path");
    if (rhost && pq.has("host")) rhost.value = pq.get("host");
    document.getElementById("req-headers").value = pq.getAll("header").join("\n");
    document.getElementById("req-cookies").value = pq.getAll("cookie").join("; ");
    rform.requestSubmit();
  }

  refresh();
  setInterval(refresh, every);
})();
