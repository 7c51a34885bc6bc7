-- A rule's refusals (issue 23): '' or 'free' (a refused request takes
-- nothing) or 'count' (it is charged anyway).
ALTER TABLE rules ADD COLUMN refusals text NOT NULL DEFAULT '';
-- An endpoint's cost header (issue 23): the response header or trailer in
-- which the upstream reports the true cost; '' for none.
ALTER TABLE endpoints ADD COLUMN cost_header text NOT NULL DEFAULT '';
