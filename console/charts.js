// Redemptions and refused attempts per hour over the last 24 hours, as SVG bars built with DOM APIs.
import {problemLine} from './api.js';
import {h, replace, s, status} from './dom.js';

const HOUR = 3600 * 1000;
const HOURS = 24;
/** The counts of GET /v1/audit/stats/hourly as 24 buckets from `start` (hours without activity are 0). */
function bucketize(hours, field, start) {
  const counts = new Array(HOURS).fill(0);
  for (const hour of hours) {
    const t = Date.parse(hour.hour);
    if (Number.isNaN(t)) continue;
    const i = Math.floor((t - start) / HOUR);
    if (i >= 0 && i < HOURS && Number.isFinite(hour[field])) counts[i] += hour[field];
  }
  return counts;
}

function hourLabel(start, i) {
  return `${String(new Date(start + i * HOUR).getUTCHours()).padStart(2, '0')}:00`;
}

/** A rounded-up axis maximum: 1, 2, 5, 10, 20, 50, … */
function niceMax(n) {
  if (n <= 1) return 1;
  const power = 10 ** Math.floor(Math.log10(n));
  for (const m of [1, 2, 5, 10]) if (m * power >= n) return m * power;
  return 10 * power;
}

function drawChart(holder, {counts, start, noun, kind, test}) {
  const width = Math.max(Math.floor(holder.clientWidth) || 640, 280);
  const height = width < 500 ? 180 : 220;
  const m = {top: 12, right: 8, bottom: 26, left: 34};
  const plotW = width - m.left - m.right;
  const plotH = height - m.top - m.bottom;
  const max = niceMax(Math.max(...counts));
  const slot = plotW / HOURS;
  const total = counts.reduce((a, b) => a + b, 0);
  const peak = counts.indexOf(Math.max(...counts));
  const summary = total === 0
    ? `No ${noun.plural} in the last 24 hours.`
    : `${total} ${total === 1 ? noun.one : noun.plural} in the last 24 hours; busiest hour ${hourLabel(start, peak)} UTC with ${counts[peak]}.`;

  const svg = s('svg', {viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': summary,
    class: `chart ${kind}`, data: {test, total}});
  for (const fraction of [0, 0.5, 1]) {
    const y = m.top + plotH - fraction * plotH;
    svg.append(s('line', {x1: m.left, x2: width - m.right, y1: y, y2: y, class: 'grid'}));
    if (fraction === 0 || max > 1 || fraction === 1) {
      const value = fraction * max;
      if (Number.isInteger(value)) svg.append(s('text', {x: m.left - 6, y: y + 4, class: 'axis y'}, String(value)));
    }
  }
  const every = width < 500 ? 6 : 3;
  counts.forEach((count, i) => {
    const barH = (count / max) * plotH;
    const x = m.left + i * slot + 1;
    const label = `${hourLabel(start, i)}–${hourLabel(start, i + 1)} UTC: ${count} ${count === 1 ? noun.one : noun.plural}`;
    svg.append(s('rect', {x, y: m.top + plotH - barH, width: Math.max(slot - 2, 1), height: barH, class: 'bar',
      data: {test: 'bar', count, hour: new Date(start + i * HOUR).toISOString()}}, s('title', null, label)));
    if (i % every === 0) svg.append(s('text', {x: m.left + i * slot + slot / 2, y: height - 8, class: 'axis x'}, hourLabel(start, i)));
  });
  replace(holder, svg, h('p', {class: 'chart-summary', text: summary}));
}

export function mountCharts(container, {api}) {
  let mounted = true;
  const chartStatus = h('p', {id: 'charts-status', class: 'status', role: 'status', hidden: true, data: {test: 'charts-status'}});
  const redemptionsHolder = h('div', {class: 'chart-holder', id: 'chart-redemptions', data: {test: 'chart-redemptions-holder'}});
  const attemptsHolder = h('div', {class: 'chart-holder', id: 'chart-attempts', data: {test: 'chart-attempts-holder'}});
  const refreshButton = h('button', {type: 'button', class: 'secondary', data: {test: 'charts-refresh'}}, 'Refresh');
  let data = null;

  function draw() {
    if (!data || !mounted) return;
    drawChart(redemptionsHolder, {counts: data.redemptions, start: data.start, noun: {one: 'redemption', plural: 'redemptions'}, kind: 'redemptions', test: 'chart-redemptions'});
    drawChart(attemptsHolder, {counts: data.attempts, start: data.start, noun: {one: 'refused attempt', plural: 'refused attempts'}, kind: 'attempts', test: 'chart-attempts'});
  }

  async function load() {
    refreshButton.disabled = true;
    status(chartStatus, 'busy', 'Loading the last 24 hours…', 'loading');
    // 24 whole-hour buckets ending with the current hour.
    const start = (Math.floor(Date.now() / HOUR) + 1 - HOURS) * HOUR;
    const from = new Date(start).toISOString().replace('.000Z', 'Z');
    try {
      // Counted by the server's database (one indexed range per table), however busy the game.
      const to = new Date(start + HOURS * HOUR).toISOString().replace('.000Z', 'Z');
      const stats = await api.get('/v1/audit/stats/hourly', {from, to});
      if (!mounted) return;
      const hours = Array.isArray(stats?.hours) ? stats.hours : [];
      data = {start, redemptions: bucketize(hours, 'redemptions', start), attempts: bucketize(hours, 'refused', start)};
      draw();
      status(chartStatus, 'info', `Since ${from}, hourly buckets in UTC.`, 'loaded');
    } catch (error) {
      if (mounted) status(chartStatus, 'problem', problemLine(error), 'error');
    } finally {
      refreshButton.disabled = false;
    }
  }

  refreshButton.addEventListener('click', load);
  // Redraw when the width changes (not on the height the drawing itself causes).
  let drawnWidth = 0;
  const resize = new ResizeObserver(() => {
    const width = Math.floor(redemptionsHolder.clientWidth);
    if (width === drawnWidth) return;
    requestAnimationFrame(() => { drawnWidth = Math.floor(redemptionsHolder.clientWidth); draw(); });
  });

  replace(container,
    h('div', {class: 'page-head'}, h('h1', {text: 'Charts'}), refreshButton),
    chartStatus,
    h('section', {class: 'card', 'aria-labelledby': 'chart-r-title'},
      h('h2', {id: 'chart-r-title', text: 'Redemptions per hour'}), redemptionsHolder),
    h('section', {class: 'card', 'aria-labelledby': 'chart-a-title'},
      h('h2', {id: 'chart-a-title', text: 'Refused attempts per hour'}), attemptsHolder));
  resize.observe(redemptionsHolder);
  load();
  return () => { mounted = false; resize.disconnect(); };
}
