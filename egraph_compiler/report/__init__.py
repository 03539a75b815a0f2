"""Reports for people: the HTML report and the e-graph picture."""
