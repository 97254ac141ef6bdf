/* The live sale view: polls the staff-only JSON (reconciliation.views.dashboard_data)
   every few seconds and updates the page in place, without reloading it.
   Accepted clicks per second = the rise of each SKU's "taken" figure (reservations
   the gate accepted: orders + in flight) between two readings, over the server's
   clock between them. Labels come translated from the template's data-l-* attributes. */
(function () {
  "use strict";

  var root, labels, url, interval, skuUrl;
  var previous = {};  // sku_id -> {taken, ms}
  var state = {loadedAt: Date.now(), polls: 0, failures: 0, lastData: null, rates: {}, peaks: {}};
  window.seckillLive = state;  // read by the tests: the page was not reloaded

  function text(el, value) {
    if (el && el.textContent !== String(value)) {
      el.textContent = String(value);
      return true;
    }
    return false;
  }

  function pct(part, total) {
    return total > 0 ? Math.max(0, Math.min(100, (part / total) * 100)).toFixed(2) + "%" : "0%";
  }

  function seconds(ms) {
    return (ms / 1000).toFixed(ms < 10000 ? 1 : 0) + " " + labels.seconds;
  }

  function newRow(sku) {
    // The same structure as the rows the template renders.
    var tr = document.createElement("tr");
    tr.id = "sku-" + sku.sku_id;
    tr.dataset.sku = sku.sku_id;
    tr.innerHTML =
      '<td class="sku"><a class="sku-link"></a><div class="live-quiet sku-name"></div><span class="sale-state"></span></td>' +
      '<td class="col-bar"><div class="live-bar" role="img">' +
      '<span class="seg seg-available"></span><span class="seg seg-frozen"></span>' +
      '<span class="seg seg-locked"></span><span class="seg seg-sold"></span></div>' +
      '<div class="redis-bar"><span class="seg seg-redis"></span></div>' +
      '<div class="live-numbers"><span class="available"></span> · <span class="frozen"></span> · ' +
      '<span class="locked"></span> · <span class="sold"></span> / <span class="total"></span></div></td>' +
      '<td class="redis"></td>' +
      '<td><span class="rate">–</span> <span class="live-quiet"></span><div class="live-quiet"><span class="taken"></span></div></td>' +
      '<td class="inflight"></td><td class="lag"></td>' +
      '<td class="drift"></td><td class="orders"></td>';
    var link = tr.querySelector(".sku-link");
    link.href = skuUrl.replace("SKU_ID", encodeURIComponent(sku.sku_id));
    link.textContent = sku.sku_id;
    tr.querySelector(".rate + .live-quiet").textContent = labels.perSecond;
    return tr;
  }

  function fillRow(tr, sku, nowMs) {
    var b = sku.buckets;
    tr.querySelector(".sku-name").textContent = sku.name;
    var badge = tr.querySelector(".sale-state");
    badge.className = "sale-state state-" + sku.sale_state;
    text(badge, sku.sale_state_label);
    ["available", "frozen", "locked", "sold"].forEach(function (k) {
      tr.querySelector(".seg-" + k).style.width = pct(b[k], b.total);
      text(tr.querySelector(".live-numbers ." + k), b[k]);
    });
    text(tr.querySelector(".live-numbers .total"), b.total);
    tr.querySelector(".live-bar").setAttribute("aria-label",
      [b.available, b.frozen, b.locked, b.sold].join(" · ") + " / " + b.total);
    var warm = sku.redis_available !== null;
    tr.querySelector(".seg-redis").style.width = warm ? pct(sku.redis_available, b.total) : "0%";
    var changed = text(tr.querySelector(".redis"), warm ? sku.redis_available : labels.notWarm);

    // Clicks per second from two successive readings of "taken".
    var prev = previous[sku.sku_id];
    var rateEl = tr.querySelector(".rate");
    if (prev && nowMs > prev.ms) {
      var rate = Math.max(0, sku.taken - prev.taken) / ((nowMs - prev.ms) / 1000);
      text(rateEl, rate.toFixed(rate < 10 ? 1 : 0));
      state.rates[sku.sku_id] = rate;
      state.peaks[sku.sku_id] = Math.max(rate, state.peaks[sku.sku_id] || 0);
    }
    previous[sku.sku_id] = {taken: sku.taken, ms: nowMs};
    text(tr.querySelector(".taken"), sku.taken);

    changed = text(tr.querySelector(".inflight"), sku.in_flight) || changed;
    var lag = tr.querySelector(".lag");
    text(lag, (sku.confirm_lag_exact ? "" : "≥ ") + seconds(sku.confirm_lag_ms));
    lag.classList.toggle("live-bad", sku.confirm_lag_ms >= 5000);

    var drift = tr.querySelector(".drift");
    drift.classList.toggle("live-bad", !!(sku.drift && sku.drift.value));
    drift.textContent = sku.drift ? String(sku.drift.value) : "–";
    var detail = document.createElement("div");
    detail.className = "live-quiet drift-detail";
    detail.textContent = sku.drift
      ? sku.drift.state_label + " · " + labels.run + " " + sku.drift.run_id + " · " + sku.drift.at
      : labels.noCheck;
    drift.appendChild(detail);

    var orders = tr.querySelector(".orders");
    var parts = Object.keys(sku.orders).map(function (st) { return [st, sku.orders[st]]; });
    orders.textContent = "";
    parts.forEach(function (p, i) {
      var span = document.createElement("span");
      span.className = "st-" + p[0];
      span.textContent = String(p[1]);
      orders.appendChild(span);
      if (i < parts.length - 1) orders.appendChild(document.createTextNode(" · "));
    });
    if (changed) {
      tr.classList.remove("flash");
      void tr.offsetWidth;  // restart the animation
      tr.classList.add("flash");
    }
  }

  function render(data) {
    var queue = document.getElementById("live-queue-depth");
    text(queue, data.queue_depth === null ? labels.unreachable : data.queue_depth);
    queue.classList.toggle("live-bad", data.queue_depth === null);
    var dead = document.getElementById("live-dead-letters");
    text(dead, data.dead_letters);
    dead.classList.toggle("live-bad", data.dead_letters > 0);
    text(document.getElementById("live-updated"), data.generated_at);

    var tbody = document.getElementById("live-rows");
    var empty = document.getElementById("live-empty");
    var seen = {};
    data.skus.forEach(function (sku) {
      seen[sku.sku_id] = true;
      var tr = document.getElementById("sku-" + sku.sku_id);
      if (!tr) {
        tr = newRow(sku);
        tbody.insertBefore(tr, empty);
      }
      fillRow(tr, sku, data.now_ms);
      tbody.insertBefore(tr, empty);  // the server's order (by SKU id)
    });
    Array.prototype.slice.call(tbody.querySelectorAll("tr[data-sku]")).forEach(function (tr) {
      if (!seen[tr.dataset.sku]) tr.remove();
    });
    empty.hidden = data.skus.length > 0;
  }

  function setState(message, bad) {
    var el = document.getElementById("live-state");
    el.textContent = message;
    el.classList.toggle("live-bad", !!bad);
    root.classList.toggle("live-stale", !!bad);
  }

  function poll() {
    if (document.hidden) {  // nothing to see: ask again when the tab is shown
      window.setTimeout(poll, interval);
      return;
    }
    fetch(url, {credentials: "same-origin", cache: "no-store", headers: {Accept: "application/json"}})
      .then(function (response) {
        var type = response.headers.get("Content-Type") || "";
        if (!response.ok || type.indexOf("application/json") !== 0) {
          // admin_view answers the login page when the session ended
          throw new Error(response.redirected || response.status === 403 ? "logged-out" : "http");
        }
        return response.json();
      })
      .then(function (data) {
        state.polls += 1;
        state.failures = 0;
        state.lastData = data;
        render(data);
        setState(labels.live, false);
      })
      .catch(function (err) {
        state.failures += 1;
        setState(err && err.message === "logged-out" ? labels.loggedOut : labels.error, true);
      })
      .then(function () {
        // a failing endpoint is asked less often, up to 30 s apart
        window.setTimeout(poll, Math.min(30000, interval * Math.pow(2, Math.min(state.failures, 4))));
      });
  }

  function start() {
    root = document.getElementById("live-sale");
    if (!root || !window.fetch) return;
    var d = root.dataset;
    url = d.url;
    skuUrl = d.skuUrl;
    interval = parseInt(d.intervalMs, 10) || 2500;
    labels = {notWarm: d.lNotWarm, unreachable: d.lUnreachable, live: d.lLive, error: d.lError,
              loggedOut: d.lLoggedOut, seconds: d.lSeconds, perSecond: d.lPerSecond, noCheck: d.lNoCheck,
              run: d.lRun};
    poll();
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
