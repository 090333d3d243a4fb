-- The demo's order database, loaded into an in-memory SQLite database on first use.
CREATE TABLE orders (
    order_id    TEXT PRIMARY KEY,
    customer    TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('processing', 'shipped', 'delivered', 'cancelled')),
    item        TEXT NOT NULL,
    quantity    INTEGER NOT NULL,
    total_eur   REAL NOT NULL,
    carrier     TEXT,
    eta         TEXT
);
INSERT INTO orders VALUES ('A1001', 'Ada Lovelace', 'shipped', 'Mechanical keyboard', 1, 129.90, 'DHL', '2026-12-02');
INSERT INTO orders VALUES ('A1002', 'Alan Turing', 'processing', 'Noise-cancelling headphones', 1, 249.00, NULL, '2026-12-05');
INSERT INTO orders VALUES ('A1003', 'Grace Hopper', 'delivered', 'USB-C cable (2 m)', 3, 26.97, 'La Poste', '2026-11-20');
INSERT INTO orders VALUES ('A1004', 'Edsger Dijkstra', 'cancelled', 'Standing desk', 1, 499.00, NULL, NULL);
INSERT INTO orders VALUES ('A1005', 'Barbara Liskov', 'shipped', 'Espresso machine', 1, 389.50, 'UPS', '2026-12-01');
