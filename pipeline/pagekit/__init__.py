"""What an experiment writes its page with: the report handle (stored values, tables, charts, check
records), the page's building blocks and the reproducer page. It sits below the experiments and imports
none of them; ``pipeline.reporting`` above assembles the site from every experiment's page."""
