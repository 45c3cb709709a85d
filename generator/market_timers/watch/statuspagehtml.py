"""The status page's template (statuspage.py renders it): one self-contained file, no script, no
external asset. Session cards wrap (flex) instead of a grid that scrolls sideways; states are told
by a word as well as a colour (greyscale, colour-blind readers); text colours are set with the
backgrounds, so a browser's dark mode cannot leave dark text on a dark cell.

A card's rows (one per cell: 17,000 at 1,000 jobs) are written by `rows`, not the template:
jinja2 looked up each of a cell's nine values through its sandboxed getattr, a third of the
page's CPU. Every value is escaped as the template's autoescape would.
"""

from markupsafe import Markup, escape


def rows(session: str, cells: list[dict]) -> Markup:
    """`<tr>` per cell (statuspage._cell's), each on its own line."""
    out = []
    day = escape(session)
    for c in cells:
        job, state = escape(c["job"]), escape(c["state"])
        alerts = "".join(f"<br>&#9888; {escape(a)}" for a in c["alerts"])
        journal = f"<code>{escape(c['journal'])}</code>" if c["journal"] else ""
        out.append(f'<tr><th class="job" scope="row">{job}</th><td class="cell {state}" '
                   f'data-job="{job}" data-session="{day}" data-state="{state}" '
                   f'title="{escape(c["fire"])}"><span class="state">{state}</span> '
                   f'{escape(c["when"])}{escape(c["text"])}{alerts}{journal}</td></tr>\n')
    return Markup("".join(out))


TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="60">
<title>{{ title }}: sessions and jobs</title>
<style>
:root { color-scheme: light; }
body { font: 14px/1.4 system-ui, sans-serif; margin: 1em; color: #1d1d1f; background: #fff; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
p.meta { color: #444; margin: 0 0 .6em; }
.banner { border: 3px solid #8b0000; background: #fde2e2; color: #1d1d1f; padding: .5em .8em;
  margin: 0 0 .6em; font-weight: 600; }
.banner.paused { border-color: #4b3a8a; background: #e9e4f7; }
.banner code, td code { font-weight: 400; background: #fff; padding: 0 .2em; }
.cards { display: flex; flex-wrap: wrap; gap: .8em; align-items: flex-start; }
.card { flex: 1 1 22em; max-width: 100%; border: 1px solid #bbb; min-width: 0; }
.card.today { border: 3px solid #1d1d1f; }
.card h2 { font-size: 1em; margin: 0; padding: .3em .5em; background: #f0f0f0; }
.card h2 .mark { color: #8a4b00; font-weight: 600; }
table { border-collapse: collapse; width: 100%; table-layout: fixed; }
th, td { border-top: 1px solid #ccc; padding: 3px 6px; text-align: left; vertical-align: top;
  overflow-wrap: anywhere; }
th.job { width: 9em; font-weight: 600; }
td.cell { font-size: 12px; color: #1d1d1f; }
td.cell .state { font-weight: 700; text-transform: uppercase; letter-spacing: .03em; }
td.cell code { display: block; font-size: 11px; }
{% for name, colour in colours %}.{{ name }} { background: {{ colour }}; }
{% endfor %}
ul.legend { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: .4em 1em; }
ul.legend li span { display: inline-block; width: 1em; height: 1em; border: 1px solid #999;
  vertical-align: middle; margin-right: .3em; }
.warn { color: #8a4b00; }
</style>
</head>
<body>
<h1>{{ title }}</h1>
{% for b in banners %}
<div class="banner {{ b.kind }}">{{ b.kind | upper }}: {{ b.what }}, by {{ b.by }} on {{ b.host }} since {{ b.since }}: {{ b.why }}. To lift it: <code>{{ b.lift }}</code></div>
{% endfor %}
<p class="meta">As of {{ now }}{% if deadman_pass %} (last dead-man pass {{ deadman_pass }}; it rewrites this page every minute){% endif %}; plan synced {{ generated }}{% if cluster %}; node {{ cluster.node }}{% if cluster.ledger_error %} <span class="warn">({{ cluster.ledger_error }})</span>{% endif %}{% endif %}.
Outbox: {{ outbox.get("pending", 0) }} pending{% if oldest %}, the oldest for {{ oldest.age }} (since {{ oldest.since }}){% endif %}, {{ outbox.get("undeliverable", 0) }} undeliverable.</p>
{% for w in warnings %}<p class="warn">{{ w }}</p>{% endfor %}
<div class="cards" id="grid">
{% for card in cards %}
<section class="card{% if card.today %} today{% endif %}">
<h2 data-session="{{ card.session }}">{{ card.weekday }} {{ card.session }}{% if card.today %} &middot; today{% endif %}{% for m in card.marks %} &middot; <span class="mark">{{ m }}</span>{% endfor %}</h2>
<table>
{{ card.rows }}</table>
</section>
{% endfor %}
</div>
<h2>Legend</h2>
<ul class="legend">{% for name, words in states %}<li><span class="{{ name }}"></span>{{ name }}: {{ words }}</li>{% endfor %}</ul>
<h2>Incidents</h2>
{% if incidents %}
<ul id="incidents">{% for session, i in incidents %}<li data-session="{{ session }}">{{ session }}: {{ i.get("rule", "") }} {{ i.get("key", "") }} &middot; {{ i.get("state", "") }}{% if i.get("opened") %}, opened {{ i.opened }}{% endif %}{% if i.get("resolved") %}, resolved {{ i.resolved }}{% endif %}</li>{% endfor %}</ul>
{% else %}
<p>None in these sessions.</p>
{% endif %}
</body>
</html>
"""
