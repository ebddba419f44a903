// The status page's live part: refresh the table and the ring from
// debug/ring and metrics, reload the page when the ring's version changes,
// and answer the lookup box from debug/lookup. The server rendered the
// page complete; this only updates it. URLs are relative to the page.
(function () {
  "use strict";
  var GREY = document.body.getAttribute("data-grey");
  var body = document.body;
  var version = body.getAttribute("data-version");
  var every = parseInt(body.getAttribute("data-refresh"), 10) || 1500;
  var svg = document.getElementById("ring");
  var C = svg.viewBox.baseVal.width / 2;
  var arcR = 0, width = 0;

  // Per upstream name: its index, row, arc, hatch and clip circle.
  var ups = {};
  document.querySelectorAll("tr.up").forEach(function (tr) {
    var i = tr.id.slice("row-".length);
    var arc = document.getElementById("arc-" + i);
    ups[tr.getAttribute("data-upstream")] = {
      row: tr,
      arc: arc,
      color: tr.querySelector("rect").getAttribute("fill"),
      hatch: document.getElementById("hatch-arc-" + i),
      clip: document.getElementById("clip-circle-" + i)
    };
    arcR = parseFloat(arc.getAttribute("r"));
    width = parseFloat(arc.parentNode.getAttribute("stroke-width"));
  });

  // state classifies an upstream as status.go's upstreamState does.
  function state(u) {
    if (!u.available) {
      var why = [];
      if (u.health === "down") why.push("health");
      if (u.breaker === "open") why.push("breaker");
      return ["ejected", why.length ? "ejected (" + why.join(", ") + ")" : "ejected"];
    }
    if (u.active_fraction < 1) return ["slow-start", "slow start " + pct(u.active_fraction)];
    return ["available", "available"];
  }

  function pct(f) { return (f * 100).toFixed(1) + "%"; }
  function num(f) { return String(Math.round(f * 1000) / 1000); }

  function setText(row, field, text) {
    var td = row.querySelector('[data-f="' + field + '"]');
    if (td && td.textContent !== text) td.textContent = text;
  }

  // parseMetrics sums ringlb_requests_total (over codes) and
  // ringlb_overflow_total by upstream from the Prometheus text format.
  function parseMetrics(text) {
    var out = { requests: {}, overflows: {} };
    var sample = /^(ringlb_requests_total|ringlb_overflow_total)\{(.*)\} (\S+)/;
    var label = /(?:^|,)upstream="((?:[^"\\]|\\.)*)"/;
    text.split("\n").forEach(function (line) {
      var m = sample.exec(line);
      if (!m) return;
      var l = label.exec(m[2]);
      if (!l) return;
      var name = l[1].replace(/\\(.)/g, function (_, c) { return c === "n" ? "\n" : c; });
      var into = m[1] === "ringlb_requests_total" ? out.requests : out.overflows;
      into[name] = (into[name] || 0) + parseFloat(m[3]);
    });
    return out;
  }

  function render(ring, counts) {
    var avail = 0;
    ring.upstreams.forEach(function (u) {
      var e = ups[u.name];
      if (!e) return;
      var s = state(u);
      if (u.available) avail++;
      e.row.className = "up " + s[0];
      e.arc.setAttribute("class", "arc " + s[0]);
      e.arc.setAttribute("stroke", u.available ? e.color : GREY);
      e.hatch.setAttribute("visibility", s[0] === "slow-start" ? "visible" : "hidden");
      var r = s[0] === "slow-start" ? arcR - width / 2 + width * u.active_fraction : arcR + width / 2 + 1;
      e.clip.setAttribute("r", num(r));
      setText(e.row, "state", s[1]);
      setText(e.row, "health", u.health);
      setText(e.row, "breaker", u.breaker);
      setText(e.row, "weight", num(u.weight));
      e.row.querySelector('[data-f="weight"]').title = u.points + " points on the ring";
      setText(e.row, "share", pct(u.share));
      setText(e.row, "inflight", String(u.inflight));
      if (counts) {
        setText(e.row, "requests", num(counts.requests[u.name] || 0));
        setText(e.row, "overflows", num(counts.overflows[u.name] || 0));
      }
    });
    var n = ring.upstreams.length;
    document.getElementById("summary").textContent = avail + " of " + n + " upstreams available";
    document.getElementById("centre-count").textContent = avail + "/" + n;
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
    Promise.all([getJSON("debug/ring"), metrics]).then(function (res) {
      var ring = res[0];
      if (ring.version !== version) {
        // New membership: the arcs come from samples of the old ring.
        setLive(true, "ring changed to " + ring.version + ", reloading");
        location.reload();
        return;
      }
      render(ring, res[1]);
      setLive(true, "live · " + new Date().toLocaleTimeString());
      body.setAttribute("data-refreshed", String(Date.now()));
      return lookup();
    }).catch(function (err) {
      setLive(false, "stale: " + err.message);
    }).then(function () { busy = false; });
  }

  // The lookup box.
  var form = document.getElementById("lookup-form");
  var input = document.getElementById("key");
  var out = document.getElementById("lookup-result");
  var marker = document.getElementById("marker");
  var key = input.value;

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function chip(name, cls, why) {
    var c = el("span", "chip" + (cls ? " " + cls : ""));
    var sw = el("i");
    sw.style.background = ups[name] ? ups[name].color : GREY;
    c.appendChild(sw);
    c.appendChild(document.createTextNode(name));
    if (why) c.appendChild(el("span", "why", why));
    c.setAttribute("data-upstream", name);
    return c;
  }

  function line(label) {
    var d = el("div", "line");
    d.appendChild(el("span", "label", label + " "));
    out.appendChild(d);
    return d;
  }

  function showLookup(res) {
    out.textContent = "";
    // The first 8 hex digits are the top 32 bits of the position under
    // either placement (nginx's 32-bit hashes sit in the top half).
    var frac = parseInt(res.hash.slice(0, 8), 16) / 4294967296;
    var d = line("key");
    d.appendChild(el("b", "key", res.key));
    d.appendChild(document.createTextNode(" hashes to "));
    d.appendChild(el("span", "hash", res.hash));
    d.appendChild(document.createTextNode(", " + pct(frac) + " of the way round the ring"));

    var o = line("owner");
    o.id = "lookup-owner";
    o.appendChild(chip(res.owner));
    var c = line("chosen");
    c.id = "lookup-chosen";
    if (res.chosen === null) {
      c.appendChild(el("span", "error", "none: a request with this key gets 503"));
    } else {
      c.appendChild(chip(res.chosen, "chosen"));
      if (res.chosen !== res.owner) c.appendChild(el("span", "", " (not the owner: see why below)"));
    }
    var why = {};
    res.skipped.forEach(function (s) { why[s.name] = s.reason; });
    var p = line("preference, clockwise");
    p.id = "lookup-preference";
    res.preference.forEach(function (name, i) {
      if (i > 0) p.appendChild(el("span", "arrow", "→"));
      var cls = name === res.chosen ? "chosen" : (why[name] ? "skipped" : "");
      p.appendChild(chip(name, cls, why[name] ? " " + why[name] : ""));
    });
    marker.setAttribute("transform", "rotate(" + (frac * 360).toFixed(2) + " " + C + " " + C + ")");
    marker.setAttribute("visibility", "visible");
  }

  function lookup() {
    if (key === "") {
      out.textContent = "";
      marker.setAttribute("visibility", "hidden");
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

  form.addEventListener("submit", function (ev) {
    ev.preventDefault();
    key = input.value;
    var url = new URL(location.href);
    if (key === "") url.searchParams.delete("key"); else url.searchParams.set("key", key);
    history.replaceState(null, "", url);
    lookup();
  });

  refresh();
  setInterval(refresh, every);
})();
