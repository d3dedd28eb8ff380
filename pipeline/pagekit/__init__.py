"""What an experiment writes its page with: the report handle (stored values, tables, charts, check
records), the page's building blocks, the reproducer page and the rules' power tables (:mod:`.power`). It
sits below the experiments and imports none of them; ``pipeline.reporting`` above assembles the site from
every experiment's page."""
