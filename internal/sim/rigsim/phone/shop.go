package phone

import (
	"fmt"
	"slices"
	"strings"
)

// product is an item in the Shop app.
type product struct {
	name    string
	price   int // yuan
	soldOut bool
	blurb   string
}

// catalogue is what the Shop sells; Headphones are sold out (the FAIL case).
var catalogue = []product{
	{name: "Coffee Beans", price: 39, blurb: "Medium roast, 500 g"},
	{name: "Green Tea", price: 25, blurb: "Loose leaf, 100 g"},
	{name: "Headphones", price: 199, soldOut: true, blurb: "Wireless, noise cancelling"},
	{name: "USB-C Cable", price: 15, blurb: "1 m, braided"},
	{name: "Notebook", price: 12, blurb: "A5, dotted"},
	{name: "Desk Lamp", price: 89, blurb: "Warm white LED"},
	{name: "Water Bottle", price: 29, blurb: "750 ml, steel"},
	{name: "Backpack", price: 159, blurb: "20 l, waterproof"},
	{name: "Umbrella", price: 49, blurb: "Compact, windproof"},
	{name: "Phone Stand", price: 19, blurb: "Aluminium, adjustable"},
	{name: "Sunglasses", price: 129, blurb: "Polarised"},
}

// CartLine is one product in the cart or in an order.
type CartLine struct {
	Name     string `json:"name"`
	Quantity int    `json:"quantity"`
	Price    int    `json:"price"`
}

// Order is a placed order.
type Order struct {
	ID    string     `json:"id"`
	Lines []CartLine `json:"lines"`
	Total int        `json:"total"`
}

// shop is the Shop app's state.
type shop struct {
	query  string
	cart   []CartLine
	orders []Order
}

func newShop() shop { return shop{} }

func findProduct(name string) (product, bool) {
	i := slices.IndexFunc(catalogue, func(p product) bool { return p.name == name })
	if i < 0 {
		return product{}, false
	}
	return catalogue[i], true
}

func (s *shop) add(pr product) {
	for i := range s.cart {
		if s.cart[i].Name == pr.name {
			s.cart[i].Quantity++
			return
		}
	}
	s.cart = append(s.cart, CartLine{Name: pr.name, Quantity: 1, Price: pr.price})
}

func (s *shop) total() int {
	t := 0
	for _, l := range s.cart {
		t += l.Price * l.Quantity
	}
	return t
}

func (s *shop) checkout() {
	if len(s.cart) == 0 {
		return
	}
	s.orders = append(s.orders, Order{ID: fmt.Sprintf("%d", 1001+len(s.orders)), Lines: s.cart, Total: s.total()})
	s.cart = nil
}

func (s *shop) cartCount() int {
	n := 0
	for _, l := range s.cart {
		n += l.Quantity
	}
	return n
}

func cartButton(p *Phone) Element {
	label := "Cart"
	if n := p.shop.cartCount(); n > 0 {
		label = fmt.Sprintf("Cart (%d)", n)
	}
	return rightAligned(label, 0.94, statusBarH+0.002, 2).color("blue").pinned().onTap(func(p *Phone) { p.push("shop.cart") })
}

func productRows(els []Element, products []product, top float64) []Element {
	for i, pr := range products {
		y := top + float64(i)*rowHeight
		name := pr.name
		open := func(p *Phone) { p.push("shop.product:" + name) }
		els = append(els, rowTarget(y, open), textEl(pr.name, marginX, y, 2).onTap(open), rightAligned(fmt.Sprintf("¥%d", pr.price), 0.84, y, 2).onTap(open))
	}
	return els
}

func shopRoot(p *Phone, _ string) page {
	els := append(titleBar("Shop", ""), cartButton(p))
	els = append(els, textEl("Search Shop", marginX, contentTop, 2).color("grey").pinned().onTap(func(p *Phone) { p.push("shop.search") }))
	els = append(els, textEl("Popular", marginX, contentTop+0.06, 1).color("grey"))
	return page{elements: productRows(els, catalogue, contentTop+0.10), scrollable: true}
}

// shopSearch takes its query from the clipboard: long-press the field, tap Paste.
func shopSearch(p *Phone, _ string) page {
	els := append(titleBar("Search", "Shop"), cartButton(p))
	els = append(els, textField(p.shop.query, "Search Shop", Box{marginX, contentTop - 0.01, 0.94, contentTop + 0.04}, func(p *Phone, text string) { p.shop.query = strings.TrimSpace(text) }))
	if p.shop.query == "" {
		return page{elements: els}
	}
	var hits []product
	for _, pr := range catalogue {
		if strings.Contains(strings.ToLower(pr.name), strings.ToLower(p.shop.query)) {
			hits = append(hits, pr)
		}
	}
	if len(hits) == 0 {
		return page{elements: append(els, centered("No results", 0.5, 0.4, 2).color("grey"))}
	}
	return page{elements: productRows(els, hits, contentTop+0.08), scrollable: true}
}

func shopProduct(p *Phone, name string) page {
	pr, _ := findProduct(name)
	els := append(titleBar("", "Back"), cartButton(p))
	els = append(els, textEl(pr.name, marginX, contentTop+0.02, 3), textEl(fmt.Sprintf("¥%d", pr.price), marginX, contentTop+0.08, 3), textEl(pr.blurb, marginX, contentTop+0.14, 2).color("grey"))
	if pr.soldOut {
		els = append(els, centered("Sold Out", 0.5, 0.50, 3).color("red"), centered("This item is currently unavailable", 0.5, 0.56, 1).color("grey"))
	} else {
		els = append(els, centered("Add to Cart", 0.5, 0.50, 3).filled("orange").onTap(func(p *Phone) {
			p.shop.add(pr)
			p.toast = "Added to cart"
		}))
	}
	return page{elements: els}
}

func shopCart(p *Phone, _ string) page {
	els := titleBar("Cart", "Back")
	if len(p.shop.cart) == 0 {
		return page{elements: append(els, centered("Your cart is empty", 0.5, 0.40, 2).color("grey"))}
	}
	y := contentTop + 0.02
	for _, l := range p.shop.cart {
		els = append(els, textEl(fmt.Sprintf("%s x%d", l.Name, l.Quantity), marginX, y, 2), rightAligned(fmt.Sprintf("¥%d", l.Price*l.Quantity), 0.84, y, 2))
		y += rowHeight
	}
	els = append(els, textEl("Total", marginX, y+0.02, 2), rightAligned(fmt.Sprintf("¥%d", p.shop.total()), 0.84, y+0.02, 2))
	return page{elements: append(els, centered("Checkout", 0.5, 0.80, 3).filled("orange").onTap(func(p *Phone) { p.push("shop.checkout") }))}
}

func shopCheckout(p *Phone, _ string) page {
	els := titleBar("Checkout", "Cart")
	els = append(els, textEl("Ship to: 1 Infinite Loop", marginX, contentTop+0.02, 2), textEl("Pay with: Card ending 4242", marginX, contentTop+0.02+rowHeight, 2))
	els = append(els, textEl("Total", marginX, contentTop+0.02+2*rowHeight, 2), rightAligned(fmt.Sprintf("¥%d", p.shop.total()), 0.84, contentTop+0.02+2*rowHeight, 2))
	return page{elements: append(els, centered("Place Order", 0.5, 0.80, 3).filled("green").onTap(func(p *Phone) {
		if len(p.shop.cart) == 0 {
			return
		}
		p.shop.checkout()
		p.stacks[p.fg] = []string{"shop.root", "shop.confirmation"}
	}))}
}

func shopConfirmation(p *Phone, _ string) page {
	els := titleBar("Thank you", "")
	if n := len(p.shop.orders); n > 0 {
		els = append(els, centered("Order placed", 0.5, 0.30, 3), centered("Order #"+p.shop.orders[n-1].ID, 0.5, 0.37, 2))
	}
	return page{elements: append(els, centered("Done", 0.5, 0.80, 3).filled("blue").onTap(func(p *Phone) { p.stacks[p.fg] = []string{"shop.root"} }))}
}
